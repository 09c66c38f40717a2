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

How one step runs (the stop before it, the start or re-use, the measurement, the wait for its
sweep) is ``step_run.StepRun``; this module walks the plan, resumes the steps an interrupted
run left and leaves a known state after a cancel.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TypedDict

from django.core.exceptions import ValidationError

from benchlib.json_types import JsonObject
from benchmarks.experiments import builds, recording, services, store
from benchmarks.experiments.models import (
    FINISHED_STEP_STATES,
    ExperimentState,
    ExperimentStep,
    StepState,
)
from benchmarks.experiments.step_run import (
    ExperimentCancelled,
    Halt,
    StepRun,
    StepsStopped,
)
from benchmarks.experiments.stops import host_probe, stop_verified
from benchmarks.sweeps.models import SweepState
from core.jobs import JobContext
from hosts.models import InstanceState, ServerInstance, ServerProfile

logger = logging.getLogger(__name__)


class ExperimentOutcome(TypedDict):
    """What the ``experiment.run`` job returns (kept on its job row): how the run ended."""

    experiment_id: int
    state: str
    reason: str
    steps_done: int
    steps_failed: int


class ExperimentRun(StepRun):
    """One execution of an experiment's plan: its steps in order (each one as ``StepRun``
    runs it), a resumed step picked up where it was cut, and a known state after a cancel."""

    async def run(self) -> ExperimentOutcome:
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
        except ExperimentCancelled:
            state, reason, evidence = await self._after_cancel()
        except Halt as halt:
            state, reason, evidence = ExperimentState.HALTED, halt.reason, halt.evidence
        except StepsStopped as stopped:
            state, reason = ExperimentState.FAILED, str(stopped)
            try:
                await self._stop_last(reason_if_dirty="after the failed start")
            except Halt as halt:
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

    # -- resuming --

    async def _resume_endpoint_step(self, step: recording.StepPlan, profile: ServerProfile) -> bool:
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
            return await self._refused(step, "no resume", exc)
        await self.update(step_id=step.step_id, state=StepState.SWEEPING, reason="")
        return await self._sweep_outcome(step, sweep.pk)

    async def _server_left_running(self) -> int | None:
        """The server an interrupted run left behind (one runs at a time per experiment)."""
        for instance_id in await store.asteps_instance_ids(self.plan.experiment_id):
            active = await store.ainstance_active(instance_id)
            if active or await store.alifecycle_busy(instance_id):
                return int(instance_id)
        return None

    async def _why_not_reusable(self, step: recording.StepPlan, row: ExperimentStep) -> str:
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
            probe = await host_probe(instance.pk, self.cfg.probe_timeout_s)
            keys = ("gpus", "driver_version", "cuda_version", "engines")
            changed = [k for k in keys if probe.get(k) != row.environment.get(k)]
            if changed:
                return f"the host's {', '.join(changed)} changed since the step started"
        return ""

    async def _resume_step(self, step: recording.StepPlan, row: ExperimentStep) -> bool:
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
            return await self._refused(step, "no resume", exc)
        await note(
            experiment_id=self.plan.experiment_id,
            entry={"event": "sweep_resumed", "step": step.index + 1, "sweep": sweep.pk},
        )
        await self.update(step_id=step.step_id, state=StepState.SWEEPING, instance_id=instance.pk)
        return await self._sweep_outcome(step, sweep.pk)

    # -- cancel --

    async def _after_cancel(self) -> tuple[str, str, JsonObject | None]:
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
        except Halt as halt:
            return ExperimentState.HALTED, halt.reason, halt.evidence
        return ExperimentState.CANCELLED, "cancelled", None

    async def _current_step_state(self) -> str:
        assert self.current_step is not None
        step = await store.astep_get(self.current_step.step_id)
        return step.get_state_display().lower()


async def run_experiment(ctx: JobContext) -> JsonObject:
    """The job handler of ``experiment.run``; params: ``{"experiment_id": ...}``."""
    experiment_id = int(ctx.params["experiment_id"])
    plan = await store.aexperiment_begin(experiment_id=experiment_id)
    if plan is None:
        return {"experiment_id": experiment_id, "skipped": "not queued"}
    return dict(await ExperimentRun(ctx, plan).run())


def experiment_on_interrupted(job_id: int, params: JsonObject) -> None:
    services.experiment_on_interrupted(job_id, params)


def experiment_on_cancel_forced(job_id: int, params: JsonObject) -> None:
    services.experiment_on_cancel_forced(job_id, params)
