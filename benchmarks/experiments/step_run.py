"""One step of an experiment, as the ``experiment.run`` job (benchmarks.experiments.runner)
runs it: stop the server started last with a verified stop, start the step's profile (or
re-use a server already ready with its launch, or check an endpoint), wait for ``ready``,
probe the host, check the outputs, sweep, and wait for the sweep's end.

Apart from the runner, which walks the plan, resumes an interrupted run and cleans up after
a cancel: this is the part every path through a step shares (a fresh step, a resumed one,
one whose server had to be replaced), so each of those reads as calls into it.
"""

from __future__ import annotations

import asyncio
import logging

from django.core.exceptions import ValidationError

from benchlib.json_types import JsonObject
from benchlib.loadgen.served import ModelDiscoveryError, discover_model
from benchmarks.experiments import equivalence, recording, store
from benchmarks.experiments.models import StepState
from benchmarks.experiments.stops import (
    SETTINGS,
    HostProbe,
    endpoint_host_probe,
    host_probe,
    stop_verified,
)
from benchmarks.sweeps import endpoints
from benchmarks.sweeps.models import Sweep, SweepState
from core.jobs import JobContext
from hosts import presets
from hosts import services as host_services
from hosts.models import InstanceState, ServerInstance, ServerProfile

logger = logging.getLogger(__name__)

# A start has ended (one way or another) once the instance is in one of these.
START_ENDED = frozenset(
    {
        InstanceState.READY,
        InstanceState.FAILED,
        InstanceState.CRASHED,
        InstanceState.DIRTY,
        InstanceState.LOST,
        InstanceState.STOPPED,
    }
)


class ExperimentCancelled(Exception):
    """The operator cancelled the experiment (raised at the next wait point)."""


class Halt(Exception):
    """A server ended not clean: nothing more starts on its GPUs (the evidence says why)."""

    def __init__(self, reason: str, evidence: JsonObject) -> None:
        super().__init__(reason)
        self.reason = reason
        self.evidence = evidence


class StepsStopped(Exception):
    """A start failed and the experiment is set to stop on a start failure."""


class StepRun:
    """The state one execution of an experiment's plan carries between its steps, and how a
    step runs (``runner.ExperimentRun`` adds the walk over the plan, resuming and the cancel)."""

    def __init__(self, ctx: JobContext, plan: recording.ExperimentPlan) -> None:
        self.ctx = ctx
        self.plan = plan
        self.cfg = SETTINGS
        self.last_instance_id: int | None = None
        self.current_step: recording.StepPlan | None = None
        self.current_sweep_id: int | None = None
        self.update = store.aexperiment_step_update

    def _check_cancel(self) -> None:
        if self.ctx.cancelled.is_set():
            raise ExperimentCancelled

    async def _poll(self) -> None:
        self._check_cancel()
        await asyncio.sleep(self.cfg.poll_seconds)

    # -- one step --

    async def _run_step(self, step: recording.StepPlan) -> bool:
        """True when the step's sweep completed."""
        if self.last_instance_id is not None:
            await self.update(step_id=step.step_id, state=StepState.STOPPING_PREVIOUS)
            await self._stop_last(reason_if_dirty=f"before step {step.index + 1}")
        profile = await store.aprofile_get(step.profile_id)
        if profile.is_endpoint:
            return await self._run_endpoint_step(step, profile)
        await self.update(step_id=step.step_id, state=StepState.STARTING)
        if self.last_instance_id is None:
            ready = await self._ready_server_of(profile.pk)
            if ready is not None:
                return await self._reuse(step, ready)
        instance = await self._start(step)
        if instance is None:
            return False
        return await self._measure(step, instance)

    async def _measure(self, step: recording.StepPlan, instance: ServerInstance) -> bool:
        """From a READY server: probe, optional output check, sweep; True when it completed."""
        probe: HostProbe = {}
        if self.cfg.probe_host:
            probe = await host_probe(instance.pk, self.cfg.probe_timeout_s)
            await self.update(step_id=step.step_id, state=StepState.STARTING, environment=probe)
        if self.plan.check_output_equivalence:
            await self.update(step_id=step.step_id, state=StepState.CHECKING_OUTPUTS)
            model = instance.profile.served_model_name
            try:
                model = model or await discover_model(instance.base_url)
            except ModelDiscoveryError as exc:
                reason = f"no model name for the output check: {exc}"
                await self.update(step_id=step.step_id, state=StepState.FAILED, reason=reason)
                return False
            result = await equivalence.equivalence_probe(
                base_url=instance.base_url,
                model=model,
                api_path=instance.profile.openai_base_path,
            )
            await self.update(
                step_id=step.step_id, state=StepState.CHECKING_OUTPUTS, equivalence=result
            )
            self._check_cancel()
        try:
            sweep = await store.aexperiment_step_sweep(
                plan=self.plan, step=step, instance_id=instance.pk, host_probe=probe
            )
        except ValidationError as exc:  # e.g. the server crashed since it was ready
            return await self._refused(step, "no sweep", exc)
        return await self._sweep_outcome(step, sweep.pk)

    # -- an endpoint profile's step: nothing to start or stop --

    async def _endpoint_ready(self, step: recording.StepPlan, profile: ServerProfile) -> bool:
        """Ask the endpoint's readiness URL (its server runs outside specdash: there is no
        start to wait for); a failed check fails the step as a failed start does."""
        await self.update(
            step_id=step.step_id,
            state=StepState.STARTING,
            reason=f"checking endpoint {profile.base_url} (not started by specdash)",
        )
        check = endpoint_check(profile)
        problem = await endpoints.endpoint_problem(
            check, request_timeout_s=endpoints.WATCH.timeout_seconds
        )
        if problem:
            await self._start_failed(step, endpoints.not_ready_reason(problem))
            return False
        return True

    async def _run_endpoint_step(self, step: recording.StepPlan, profile: ServerProfile) -> bool:
        if not await self._endpoint_ready(step, profile):
            return False
        base_url = profile.base_url.rstrip("/")
        if self.plan.check_output_equivalence:
            await self.update(step_id=step.step_id, state=StepState.CHECKING_OUTPUTS, reason="")
            try:
                model = profile.served_model_name or await discover_model(base_url)
            except ModelDiscoveryError as exc:
                reason = f"no model name for the output check: {exc}"
                await self.update(step_id=step.step_id, state=StepState.FAILED, reason=reason)
                return False
            result = await equivalence.equivalence_probe(
                base_url=base_url, model=model, api_path=profile.openai_base_path
            )
            await self.update(
                step_id=step.step_id, state=StepState.CHECKING_OUTPUTS, equivalence=result
            )
            self._check_cancel()
        # The endpoint's registered host is probed as a managed server's is (GPUs, driver,
        # engines, load); without one there is nothing to ask.
        probe = await endpoint_host_probe(profile.pk, self.cfg.probe_timeout_s)
        try:
            sweep = await store.aexperiment_step_sweep(
                plan=self.plan, step=step, instance_id=None, host_probe=probe, endpoint=profile
            )
        except ValidationError as exc:
            return await self._refused(step, "no sweep", exc)
        await self.update(step_id=step.step_id, state=StepState.SWEEPING, reason="")
        return await self._sweep_outcome(step, sweep.pk)

    async def _refused(self, step: recording.StepPlan, what: str, exc: ValidationError) -> bool:
        """The step fails with the sweep service's reasons (``no sweep: …``, ``no resume: …``);
        False, as the step's outcome."""
        reason = "; ".join(exc.messages)
        await self.update(step_id=step.step_id, state=StepState.FAILED, reason=f"{what}: {reason}")
        return False

    async def _sweep_outcome(self, step: recording.StepPlan, sweep_id: int) -> bool:
        self.current_sweep_id = sweep_id
        final = await self._sweep_finished(sweep_id)
        retries = 0
        while final.state == SweepState.INTERRUPTED and retries < self.cfg.sweep_resumes:
            # Its load generator died under a live experiment job (killed from outside):
            # continue from the cut level on the same server while that is still ready.
            retries += 1
            try:
                await store.asweep_resume(sweep=final, user=self.plan.user)
            except ValidationError:
                break
            await store.aexperiment_history_note(
                experiment_id=self.plan.experiment_id,
                entry={"event": "sweep_resumed", "step": step.index + 1, "sweep": sweep_id,
                       "reason": final.reason},
            )  # fmt: skip
            final = await self._sweep_finished(sweep_id)
        self.current_sweep_id = None
        if final.state == SweepState.COMPLETED:
            await self.update(step_id=step.step_id, state=StepState.DONE, reason="")
            return True
        await self.update(
            step_id=step.step_id,
            state=StepState.FAILED,
            reason=f"sweep #{final.pk} {final.state}: {final.reason}".rstrip(": "),
        )
        return False

    async def _ready_server_of(self, profile_id: int) -> ServerInstance | None:
        """A READY server of the profile launched as the profile says now, with no stop asked
        and no sweep running on it: started before the experiment (the README's sweep step
        leaves one), it would otherwise hold the port this step's start needs."""
        # With its host: the launch it would run names the address it is reached at.
        profile = await store.aprofile_get(profile_id, with_host=True)
        for instance in await store.aready_instances(profile):
            same_launch = (list(instance.launch_argv), dict(instance.env)) == (
                presets.expand_argv(profile.launch_argv, profile),
                dict(profile.env),
            )
            busy = await store.asweep_busy_on(instance)
            # Its lifecycle job runs for as long as the server does (it watches it): that is
            # no reason not to re-use it, only a sweep on it is.
            if same_launch and not busy:
                return instance
        return None

    async def _reuse(self, step: recording.StepPlan, instance: ServerInstance) -> bool:
        """Measure on a server that was already ready; the experiment stops it afterwards as
        it stops the servers it started (the next step needs a clean GPU)."""
        await self.update(
            step_id=step.step_id,
            state=StepState.STARTING,
            instance_id=instance.pk,
            reason=f"re-using server #{instance.pk}, already ready",
        )
        await store.aexperiment_history_note(
            experiment_id=self.plan.experiment_id,
            entry={"event": "server_reused", "step": step.index + 1, "instance": instance.pk,
                   "reason": "it was already ready with this profile's launch"},
        )  # fmt: skip
        self.last_instance_id = instance.pk
        return await self._measure(step, instance)

    async def _start(self, step: recording.StepPlan) -> ServerInstance | None:
        profile = await store.aprofile_get(step.profile_id)
        try:
            # One sync call: a worker shutdown cannot fall between the start and the step
            # learning its server (a resume must find the server to stop or re-use it).
            instance = await store.aexperiment_step_start(
                step_id=step.step_id, profile=profile, user=self.plan.user
            )
        except host_services.ServerConflict as exc:
            if exc.holder_id is not None:
                # The page offers to stop it and retry (benchmarks.experiments.selectors).
                await store.aexperiment_history_note(
                    experiment_id=self.plan.experiment_id,
                    entry={"event": "port_held", "step": step.index + 1,
                           "instance": exc.holder_id, "reason": str(exc)},
                )  # fmt: skip
            await self._start_failed(step, f"could not start: {exc}")
            return None
        self.last_instance_id = instance.pk
        while True:
            instance = await store.ainstance_get(instance.pk, with_profile_and_host=True)
            if instance.state in START_ENDED:
                break
            await self._poll()
        if instance.state == InstanceState.READY:
            return instance
        detail = f": {instance.reason}" if instance.reason else ""
        await self._start_failed(
            step, f"server #{instance.pk} did not become ready ({instance.state}){detail}"
        )
        return None

    async def _start_failed(self, step: recording.StepPlan, reason: str) -> None:
        """Record the failure; raise when the experiment stops on a start failure."""
        await self.update(step_id=step.step_id, state=StepState.FAILED, reason=reason)
        if not self.plan.continue_on_start_failure:
            raise StepsStopped(
                f"step {step.index + 1} ({step.label}: {step.profile_name}) {reason}; "
                "the experiment stops on a start failure"
            )

    async def _sweep_finished(self, sweep_id: int) -> Sweep:
        while True:
            sweep = await store.asweep_get(sweep_id)
            if sweep.is_finished:
                return sweep
            await self._poll()

    async def _stop_last(self, *, reason_if_dirty: str) -> None:
        """Verified stop of the last server; a server that is not clean halts everything."""
        if self.last_instance_id is None:
            return
        instance_id = self.last_instance_id
        outcome = await stop_verified(instance_id, settings=self.cfg)
        if not outcome.clean:
            if self.current_step is not None:
                await self.update(
                    step_id=self.current_step.step_id,
                    state=StepState.FAILED,
                    reason=f"server #{instance_id} is not clean ({outcome.state}): not started",
                )
            raise Halt(
                f"server #{instance_id} ended {outcome.state} {reason_if_dirty}: "
                f"{outcome.reason or 'its stop could not be verified'}. Nothing more was "
                "started on its GPUs; see the instance page for who holds what.",
                {"instance_id": instance_id, "state": outcome.state, **outcome.evidence},
            )
        self.last_instance_id = None


def endpoint_check(profile: ServerProfile) -> endpoints.EndpointCheck:
    path = "/" + profile.readiness_path.lstrip("/") if profile.readiness_path else ""
    return endpoints.EndpointCheck(
        url=profile.base_url.rstrip("/") + path, status=profile.readiness_status
    )
