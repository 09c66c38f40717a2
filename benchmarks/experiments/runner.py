"""The ``experiment.run`` job: run every step of an experiment unattended.

Per step: stop the server this experiment started last and require a verified clean stop
(``stopped``, or ``failed`` after a verified kill); a ``dirty`` (or lost) server halts the
experiment with its evidence, so nothing ever starts on a GPU that is not clean. Then start
the step's profile (``instance_start``: the ``server.run`` job does the launch), wait for
``ready`` or a failure, optionally send the output-equivalence prompts, sweep
(``sweep_create``: the ``sweep.run`` job), record, continue. After the last step its server
is stopped the same way and the comparison is built and stored.

The jobs this one waits on run in the same worker as asyncio tasks; everything here only
polls the database (async ORM) and sleeps. A cancel cancels the sweep in progress, stops the
server with a verified stop, and ends the experiment ``cancelled`` (``halted`` if that stop
is not clean). A worker shutdown cancels this task: the interrupt hook records it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from django.core.exceptions import ValidationError

from benchlib.loadgen.served import ModelDiscoveryError, discover_model
from benchmarks.experiments import builds, equivalence, services, store
from benchmarks.experiments.stops import SETTINGS as SETTINGS
from benchmarks.experiments.stops import RunnerSettings as RunnerSettings
from benchmarks.experiments.stops import StopOutcome as StopOutcome
from benchmarks.experiments.stops import endpoint_host_probe
from benchmarks.experiments.stops import host_probe as _host_probe
from benchmarks.experiments.stops import stop_verified as stop_verified
from benchmarks.models import ExperimentStep, StepState, Sweep, SweepState
from benchmarks.models.experiments import FINISHED_STEP_STATES, ExperimentState
from benchmarks.sweeps import endpoints
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


class _Cancelled(Exception):
    """The operator cancelled the experiment (raised at the next wait point)."""


class _Halt(Exception):
    def __init__(self, reason: str, evidence: dict[str, Any]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.evidence = evidence


class _StepsStopped(Exception):
    """A start failed and the experiment is set to stop on a start failure."""


class ExperimentRun:
    """One execution of an experiment's plan (the state between steps lives here)."""

    def __init__(self, ctx: JobContext, plan: services.ExperimentPlan) -> None:
        self.ctx = ctx
        self.plan = plan
        self.cfg = SETTINGS
        self.last_instance_id: int | None = None
        self.current_step: services.StepPlan | None = None
        self.current_sweep_id: int | None = None
        self.update = store.aexperiment_step_update

    def _check_cancel(self) -> None:
        if self.ctx.cancelled.is_set():
            raise _Cancelled

    async def _poll(self) -> None:
        self._check_cancel()
        await asyncio.sleep(self.cfg.poll_seconds)

    async def run(self) -> dict[str, Any]:
        state: str = ExperimentState.COMPLETED
        reason, evidence = "", None
        done = failed = 0
        try:
            self.last_instance_id = await self._server_left_running()
            for step in self.plan.steps:
                self._check_cancel()
                row = await store.astep_get(step.step_id)
                if row.state in FINISHED_STEP_STATES:  # a resumed run: measured before
                    done += row.state == StepState.DONE
                    failed += row.state == StepState.FAILED
                    continue
                self.current_step = step
                resumed = row.instance_id is not None or await store.astep_has_sweep(step.step_id)
                if await (self._resume_step(step, row) if resumed else self._run_step(step)):
                    done += 1
                else:
                    failed += 1
            self.current_step = None
            await self._stop_last(reason_if_dirty="after the last step")
            if done == 0:
                state, reason = ExperimentState.FAILED, "no step completed its sweep"
            elif failed:
                reason = f"{failed} of {len(self.plan.steps)} steps failed"
        except _Cancelled:
            state, reason, evidence = await self._after_cancel()
        except _Halt as halt:
            state, reason, evidence = ExperimentState.HALTED, halt.reason, halt.evidence
        except _StepsStopped as stopped:
            state, reason = ExperimentState.FAILED, str(stopped)
            try:
                await self._stop_last(reason_if_dirty="after the failed start")
            except _Halt as halt:
                state, reason, evidence = ExperimentState.HALTED, halt.reason, halt.evidence
        except asyncio.CancelledError:
            raise  # worker shutdown: the interrupt hook records it
        except Exception as exc:
            logger.exception("experiment %s failed", self.plan.experiment_id)
            await self._record_error(exc)
            if self.last_instance_id is not None:
                # Best effort: a bug here must not leave a server running unattended.
                with contextlib.suppress(Exception):
                    await stop_verified(self.last_instance_id, settings=self.cfg)
            raise
        try:
            await builds.experiment_store_comparison_off_worker(
                experiment_id=self.plan.experiment_id
            )
        except Exception as exc:  # the runs are recorded; a comparison bug must not hide them
            logger.exception("experiment %s: comparison failed", self.plan.experiment_id)
            reason = f"{reason}; the comparison could not be built: {exc}".lstrip("; ")
        await store.aexperiment_finish(
            experiment_id=self.plan.experiment_id, state=state, reason=reason, evidence=evidence
        )
        try:
            # Kept on the experiment and its sweeps, where the comparison page shows it.
            await store.aaudit_experiment_store(experiment_id=self.plan.experiment_id)
        except Exception:  # the runs and comparison are recorded; an audit bug hides neither
            logger.exception("experiment %s: the audit at its end failed", self.plan.experiment_id)
        return {
            "experiment_id": self.plan.experiment_id,
            "state": state,
            "reason": reason,
            "steps_done": done,
            "steps_failed": failed,
        }

    async def _record_error(self, exc: Exception) -> None:
        reason = f"experiment job error: {type(exc).__name__}: {exc}"
        if self.current_step is not None:
            await self.update(
                step_id=self.current_step.step_id, state=StepState.FAILED, reason=reason
            )
        await store.aexperiment_finish(
            experiment_id=self.plan.experiment_id, state=ExperimentState.FAILED, reason=reason
        )

    # -- one step --

    async def _run_step(self, step: services.StepPlan) -> bool:
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

    async def _measure(self, step: services.StepPlan, instance: ServerInstance) -> bool:
        """From a READY server: probe, optional output check, sweep; True when it completed."""
        probe: dict[str, Any] = {}
        if self.cfg.probe_host:
            probe = await _host_probe(instance.pk, self.cfg.probe_timeout_s)
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
            reason = "; ".join(exc.messages)
            await self.update(
                step_id=step.step_id, state=StepState.FAILED, reason=f"no sweep: {reason}"
            )
            return False
        return await self._sweep_outcome(step, sweep.pk)

    # -- an endpoint profile's step: nothing to start or stop --

    async def _endpoint_ready(self, step: services.StepPlan, profile: ServerProfile) -> bool:
        """Ask the endpoint's readiness URL (its server runs outside specdash: there is no
        start to wait for); a failed check fails the step as a failed start does."""
        await self.update(
            step_id=step.step_id,
            state=StepState.STARTING,
            reason=f"checking endpoint {profile.base_url} (not started by specdash)",
        )
        check = _endpoint_check(profile)
        problem = await endpoints.endpoint_problem(
            check, request_timeout_s=endpoints.WATCH.timeout_seconds
        )
        if problem:
            await self._start_failed(step, endpoints.not_ready_reason(problem))
            return False
        return True

    async def _run_endpoint_step(self, step: services.StepPlan, profile: ServerProfile) -> bool:
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
            reason = "; ".join(exc.messages)
            await self.update(
                step_id=step.step_id, state=StepState.FAILED, reason=f"no sweep: {reason}"
            )
            return False
        await self.update(step_id=step.step_id, state=StepState.SWEEPING, reason="")
        return await self._sweep_outcome(step, sweep.pk)

    async def _resume_endpoint_step(self, step: services.StepPlan, profile: ServerProfile) -> bool:
        sweep = await store.astep_sweep(step.step_id)
        if sweep is None:
            return await self._run_step(step)
        sweep = await self._sweep_finished(sweep.pk)
        if sweep.state != SweepState.INTERRUPTED:
            return await self._sweep_outcome(step, sweep.pk)
        if self.last_instance_id is not None:
            await self.update(step_id=step.step_id, state=StepState.STOPPING_PREVIOUS)
            await self._stop_last(reason_if_dirty=f"before resuming step {step.index + 1}")
        if not await self._endpoint_ready(step, profile):
            return False
        try:
            await store.asweep_resume(sweep=sweep, user=self.plan.user)
        except ValidationError as exc:
            reason = "; ".join(exc.messages)
            await self.update(
                step_id=step.step_id, state=StepState.FAILED, reason=f"no resume: {reason}"
            )
            return False
        await self.update(step_id=step.step_id, state=StepState.SWEEPING, reason="")
        return await self._sweep_outcome(step, sweep.pk)

    async def _sweep_outcome(self, step: services.StepPlan, sweep_id: int) -> bool:
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

    # -- resuming --

    async def _server_left_running(self) -> int | None:
        """The server an interrupted run left behind (one runs at a time per experiment)."""
        for instance_id in await store.asteps_instance_ids(self.plan.experiment_id):
            active = await store.ainstance_active(instance_id)
            if active or await store.alifecycle_busy(instance_id):
                return int(instance_id)
        return None

    async def _why_not_reusable(self, step: services.StepPlan, row: ExperimentStep) -> str:
        """ "" when the step's server can carry on: still READY (adopted after the restart),
        the one left running, and launched exactly as its profile says now on a host that
        reports the same GPUs, driver and engines; else why not."""
        if row.instance_id is None:
            return "the step had no server yet"
        instance = await store.ainstance_get(row.instance_id)
        if instance.pk != self.last_instance_id or instance.state != InstanceState.READY:
            return f"server #{instance.pk} is {instance.state}"
        if instance.stop_requested:
            return f"server #{instance.pk} is being stopped"
        profile = await store.aprofile_get(step.profile_id)
        if instance.profile_id != profile.pk or (
            list(instance.launch_argv),
            dict(instance.env),
        ) != (list(profile.launch_argv), dict(profile.env)):
            return f"profile {profile.name} changed since server #{instance.pk} was launched"
        if self.cfg.probe_host and row.environment and "error" not in row.environment:
            probe = await _host_probe(instance.pk, self.cfg.probe_timeout_s)
            keys = ("gpus", "driver_version", "cuda_version", "engines")
            changed = [k for k in keys if probe.get(k) != row.environment.get(k)]
            if changed:
                return f"the host's {', '.join(changed)} changed since the step started"
        return ""

    async def _resume_step(self, step: services.StepPlan, row: ExperimentStep) -> bool:
        """Pick up a step an interrupted run left: its server if it can carry on, else a
        verified stop and a fresh start; its sweep resumed from the first unfinished level."""
        profile = await store.aprofile_get(step.profile_id)
        if profile.is_endpoint:
            return await self._resume_endpoint_step(step, profile)
        note = store.aexperiment_history_note
        why = await self._why_not_reusable(step, row)
        sweep = await store.astep_sweep(step.step_id)
        if sweep is not None:
            # Its own job ends it (a dead worker's sweep once its lease expires).
            sweep = await self._sweep_finished(sweep.pk)
            if sweep.state != SweepState.INTERRUPTED:
                return await self._sweep_outcome(step, sweep.pk)
        instance: ServerInstance | None = None
        if not why:
            assert row.instance_id is not None
            instance = await store.ainstance_get(row.instance_id, with_profile_and_host=True)
            await note(
                experiment_id=self.plan.experiment_id,
                entry={"event": "server_reused", "step": step.index + 1, "instance": instance.pk},
            )
        else:
            await note(
                experiment_id=self.plan.experiment_id,
                entry={"event": "server_replaced", "step": step.index + 1, "reason": why},
            )
            if sweep is None:
                return await self._run_step(step)
            if self.last_instance_id is not None:
                await self.update(step_id=step.step_id, state=StepState.STOPPING_PREVIOUS)
                await self._stop_last(reason_if_dirty=f"before resuming step {step.index + 1}")
            await self.update(step_id=step.step_id, state=StepState.STARTING)
            instance = await self._start(step)
            if instance is None:
                return False
        if sweep is None:
            return await self._measure(step, instance)
        try:
            await store.asweep_resume(sweep=sweep, user=self.plan.user, instance=instance)
        except ValidationError as exc:
            reason = "; ".join(exc.messages)
            await self.update(
                step_id=step.step_id, state=StepState.FAILED, reason=f"no resume: {reason}"
            )
            return False
        await note(
            experiment_id=self.plan.experiment_id,
            entry={"event": "sweep_resumed", "step": step.index + 1, "sweep": sweep.pk},
        )
        await self.update(step_id=step.step_id, state=StepState.SWEEPING, instance_id=instance.pk)
        return await self._sweep_outcome(step, sweep.pk)

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

    async def _reuse(self, step: services.StepPlan, instance: ServerInstance) -> bool:
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

    async def _start(self, step: services.StepPlan) -> ServerInstance | None:
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

    async def _start_failed(self, step: services.StepPlan, reason: str) -> None:
        """Record the failure; raise when the experiment stops on a start failure."""
        await self.update(step_id=step.step_id, state=StepState.FAILED, reason=reason)
        if not self.plan.continue_on_start_failure:
            raise _StepsStopped(
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
            raise _Halt(
                f"server #{instance_id} ended {outcome.state} {reason_if_dirty}: "
                f"{outcome.reason or 'its stop could not be verified'}. Nothing more was "
                "started on its GPUs; see the instance page for who holds what.",
                {"instance_id": instance_id, "state": outcome.state, **outcome.evidence},
            )
        self.last_instance_id = None

    # -- cancel --

    async def _after_cancel(self) -> tuple[str, str, dict[str, Any] | None]:
        """Leave everything in a known state: sweep cancelled, server stopped and verified."""
        if self.current_sweep_id is not None:
            sweep = await store.asweep_get(self.current_sweep_id)
            await store.asweep_cancel(sweep=sweep)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.cfg.sweep_cancel_timeout_s
            while not (await store.asweep_get(sweep.pk)).is_finished:
                if loop.time() > deadline:
                    break
                await asyncio.sleep(self.cfg.poll_seconds)
        if self.current_step is not None:
            await self.update(
                step_id=self.current_step.step_id,
                state=StepState.CANCELLED,
                reason="cancelled while " + await self._current_step_state(),
            )
            self.current_step = None
        try:
            await self._stop_last(reason_if_dirty="after the cancel")
        except _Halt as halt:
            return ExperimentState.HALTED, halt.reason, halt.evidence
        return ExperimentState.CANCELLED, "cancelled", None

    async def _current_step_state(self) -> str:
        assert self.current_step is not None
        step = await store.astep_get(self.current_step.step_id)
        return step.get_state_display().lower()


def _endpoint_check(profile: ServerProfile) -> endpoints.EndpointCheck:
    path = "/" + profile.readiness_path.lstrip("/") if profile.readiness_path else ""
    return endpoints.EndpointCheck(
        url=profile.base_url.rstrip("/") + path, status=profile.readiness_status
    )


async def run_experiment(ctx: JobContext) -> dict[str, Any]:
    """The job handler of ``experiment.run``; params: ``{"experiment_id": ...}``."""
    experiment_id = int(ctx.params["experiment_id"])
    plan = await store.aexperiment_begin(experiment_id=experiment_id)
    if plan is None:
        return {"experiment_id": experiment_id, "skipped": "not queued"}
    return await ExperimentRun(ctx, plan).run()


def experiment_on_interrupted(job_id: int, params: dict[str, Any]) -> None:
    services.experiment_on_interrupted(job_id, params)


def experiment_on_cancel_forced(job_id: int, params: dict[str, Any]) -> None:
    services.experiment_on_cancel_forced(job_id, params)
