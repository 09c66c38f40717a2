"""The ``sweep.run`` job: one load-generator process per sweep, watched until it ends.

The sweep ends as: completed (run_end completed); cancelled (an operator's cancel: SIGTERM,
the load generator reports the level in progress as partial); failed (the load generator
gave up on the server, the server instance left READY, or the load generator itself died);
interrupted (the worker running the job went away: ``sweep_on_interrupted``). Levels that
finished are kept in every case.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from django.conf import settings

from benchlib.loadgen.events import LoadgenEvent
from benchlib.loadgen.served import ModelDiscoveryError, discover_model
from benchmarks.sweeps import distributed, endpoints, recording, store
from benchmarks.sweeps.events import SweepRecorder
from benchmarks.sweeps.models import SweepState
from benchmarks.sweeps.recordfile import disk_full, disk_full_reason, trim_torn_tail
from benchmarks.sweeps.runner import LoadgenProcess, loadgen_argv
from benchmarks.sweeps.supervisor import (
    Stopping,
    supervise,
    sweep_server_metrics,
    watch_instance,
)
from core.jobs import JobContext
from core.jobs.registry import JobParams
from core.models import Job
from hosts.telemetry import manager as telemetry
from hosts.telemetry.levels import LevelServerMetrics

logger = logging.getLogger(__name__)


@dataclass
class HandlerSettings:
    instance_poll_seconds: float = 1.0
    # Time the load generator gets to report the partial level after SIGTERM; well under the
    # worker's cancel grace, so the job finishes the sweep itself.
    stop_grace_seconds: float = 20.0
    # On a worker shutdown: how long the job waits for the load generator to exit.
    cancel_wait_seconds: float = 5.0

    # How long a load generator that gave up waits for the lifecycle's verdict on the server:
    # its watch notices a death within one poll (1 s) plus an agent call, and this job's
    # poll adds one more second.
    crash_settle_seconds: float = 6.0


SETTINGS = HandlerSettings()


async def _tick(recorder: SweepRecorder) -> None:
    while True:
        await asyncio.sleep(recorder.batch_seconds / 2)
        await recorder.flush_if_due()


def _outcome(
    recorder: SweepRecorder,
    proc: LoadgenProcess,
    *,
    exit_code: int | None,
    cancelled: bool,
    crash: str | None,
    records_path: Path | str = "the records file",
) -> tuple[str, str]:
    run_end = recorder.run_end
    status = run_end["status"] if run_end is not None else None
    reason = (run_end.get("reason") if run_end is not None else None) or ""
    if crash is not None:
        return SweepState.FAILED, f"server crashed mid-sweep: {crash}"
    if cancelled:
        return SweepState.CANCELLED, "cancelled"
    if status == "completed":
        return SweepState.COMPLETED, ""
    if status == "cancelled":
        return SweepState.CANCELLED, f"load generator cancelled: {reason}"
    tail = proc.stderr_text()[-2000:]
    if disk_full(f"{reason}\n{tail}"):
        return SweepState.FAILED, disk_full_reason(records_path)
    if status == "failed":
        return SweepState.FAILED, f"load generator stopped the sweep: {reason}"
    if exit_code is not None and exit_code < 0 and not proc.terminated:
        # Killed from outside (the OOM killer, an operator): nothing the server did; the
        # finished levels are kept and the sweep can be resumed from the cut level.
        return (
            SweepState.INTERRUPTED,
            f"interrupted: the load generator was killed by signal {-exit_code}",
        )
    return (
        SweepState.FAILED,
        f"load generator exited with code {exit_code} before finishing"
        + (f":\n{tail}" if tail else " (no output on stderr)"),
    )


def _stopping() -> Stopping:
    """One process: killed past its drain grace; on a worker's shutdown its reader goes on."""
    return Stopping(
        drain_grace=SETTINGS.stop_grace_seconds,
        kill_on_overrun=True,
        exit_wait=SETTINGS.stop_grace_seconds,
        crash_settle=SETTINGS.crash_settle_seconds,
    )


def _crash_watch(plan: recording.SweepPlan) -> Callable[[], Coroutine[Any, Any, str]] | None:
    if plan.instance_id is not None:
        instance_id = plan.instance_id
        return lambda: watch_instance(instance_id, SETTINGS.instance_poll_seconds)
    if plan.endpoint_check is not None:
        # No lifecycle watches a server specdash did not start: its readiness URL is asked.
        check = plan.endpoint_check
        return lambda: endpoints.watch_endpoint(check, endpoints.WATCH)
    return None


async def _supervise(
    ctx: JobContext, plan: recording.SweepPlan, proc: LoadgenProcess, recorder: SweepRecorder
) -> tuple[str, str, int | None]:
    server = sweep_server_metrics(plan)

    async def take(event: LoadgenEvent) -> None:
        await recorder.handle(event)
        # After the recorder, so a finished level's row exists for its server figures.
        await server.observe(event)

    ticker = asyncio.create_task(_tick(recorder))
    try:
        ending = await supervise(
            proc,
            take=take,
            cancelled=ctx.cancelled,
            stopping=_stopping(),
            crash_watch=_crash_watch(plan),
            completed=lambda: (
                recorder.run_end is not None and recorder.run_end["status"] == "completed"
            ),
        )
    finally:
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
    await recorder.flush()
    # The load generator has exited: a record it was writing when it stopped (a full disk, a
    # kill) is cut, so the file holds whole lines only and a resume appends after them.
    await asyncio.to_thread(trim_torn_tail, Path(plan.records_path))
    if ending.crash is not None:
        await store.asweep_levels_cut_by_crash(sweep_id=plan.sweep_id, from_index=plan.level_offset)
    state, reason = _outcome(
        recorder,
        proc,
        exit_code=ending.exit_code,
        cancelled=ending.cancelled,
        crash=ending.crash,
        records_path=plan.records_path,
    )
    return state, reason, ending.exit_code


async def audit_at_end(sweep_id: int) -> None:
    """Audit the sweep just ended and keep the outcome, which its pages show. Its figures are
    recorded whatever the audit says: a bug in the audit is logged and fails no sweep."""
    try:
        await store.aaudit_sweep_store(sweep_id=sweep_id)
    except Exception:
        logger.exception("sweep %s: the audit at its end could not run", sweep_id)


class SweepRunResult(TypedDict):
    """The ``sweep.run`` job's result, as stored in ``Job.result`` (here and by
    ``distributed.run_split_sweep`` for a sweep with split levels)."""

    sweep_id: int
    skipped: NotRequired[str]  # why the job did nothing (not queued, server not ready)
    state: NotRequired[str]  # a SweepState
    reason: NotRequired[str]
    levels_finished: NotRequired[int]
    loadgen_exit_code: NotRequired[int | None]
    split: NotRequired[bool]  # run as shards (distributed)


async def run_sweep(ctx: JobContext) -> SweepRunResult:
    """The job handler of ``sweep.run``; params: ``{"sweep_id": ...}``."""
    sweep_id = int(ctx.params["sweep_id"])
    resume_from = int(ctx.params.get("resume_from", 0))
    plan = await store.asweep_begin(sweep_id=sweep_id, resume_from=resume_from)
    if plan is None:
        return {"sweep_id": sweep_id, "skipped": "not queued or server not ready"}
    finish = store.asweep_finish
    if ctx.cancelled.is_set():
        await finish(sweep_id=sweep_id, state=SweepState.CANCELLED, reason="cancelled")
        return {"sweep_id": sweep_id, "state": SweepState.CANCELLED}
    if plan.endpoint_check is not None:
        problem = await endpoints.endpoint_problem(
            plan.endpoint_check, request_timeout_s=endpoints.WATCH.timeout_seconds
        )
        if problem:
            reason = endpoints.not_ready_reason(problem)
            await finish(sweep_id=sweep_id, state=SweepState.FAILED, reason=reason)
            return {"sweep_id": sweep_id, "state": SweepState.FAILED, "reason": reason}
    if plan.endpoint_host_id is not None:
        # Nothing started this server here, so nothing has started its host's probes: the
        # sweep does (the host's plan keeps them while the sweep runs, its rows kept with it).
        await telemetry.ensure_for_host(plan.endpoint_host_id)
    if not plan.model and (plan.load.get("api") or "completions") != "generate":
        # Asked once here, not by each load-generator process of a split level, and a server
        # that cannot say fails the sweep before any load (instead of every request's 404).
        try:
            plan = dataclasses.replace(plan, model=await discover_model(plan.base_url))
        except ModelDiscoveryError as exc:
            reason = f"no model name to send: {exc}"
            await finish(sweep_id=sweep_id, state=SweepState.FAILED, reason=reason)
            return {"sweep_id": sweep_id, "state": SweepState.FAILED, "reason": reason}
        await store.asweep_model_discovered(sweep_id=sweep_id, model=plan.model)
    if distributed.split_needed(plan.levels, plan.load):
        # Levels above SPECDASH_LOADGEN_MAX_STREAMS run as several processes started together.
        result = await distributed.run_split_sweep(ctx, plan)
        await audit_at_end(sweep_id)
        return result
    argv = loadgen_argv(
        base_url=plan.base_url,
        model=plan.model,
        levels=plan.levels,
        load=plan.load,
        records_path=plan.records_path,
        level_index_base=plan.level_offset,
        attempt=plan.attempt,
        append_records=True,
        metrics_url=plan.metrics_url or LevelServerMetrics.metrics_url(plan.base_url),
        engine=plan.engine,
    )
    try:
        proc = await LoadgenProcess.start(argv, cwd=settings.BASE_DIR)
    except OSError as exc:
        reason = f"could not start the load generator: {exc}"
        await finish(sweep_id=sweep_id, state=SweepState.FAILED, reason=reason)
        return {"sweep_id": sweep_id, "state": SweepState.FAILED}
    logger.info("sweep %s: load generator pid %s: %s", sweep_id, proc.pid, argv)
    # The load generator reports the sweep's own level indices: recorder and server figures
    # take them as they come.
    recorder = SweepRecorder(sweep_id)
    try:
        state, reason, exit_code = await _supervise(ctx, plan, proc, recorder)
    except asyncio.CancelledError:
        # The worker is shutting down: stop the load (the interrupt hook records the sweep).
        # Wait a moment for it to write the cut level's records, so they are in the file
        # (under this attempt) before anyone resumes the sweep and appends the next one.
        proc.terminate()
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait(SETTINGS.cancel_wait_seconds))
        raise
    except Exception as exc:
        proc.kill()
        await finish(
            sweep_id=sweep_id,
            state=SweepState.FAILED,
            reason=f"sweep job error: {type(exc).__name__}: {exc}",
        )
        raise
    await finish(sweep_id=sweep_id, state=state, reason=reason)
    await audit_at_end(sweep_id)
    return {
        "sweep_id": sweep_id,
        "state": state,
        "reason": reason,
        "levels_finished": recorder.levels_finished,
        "loadgen_exit_code": exit_code,
    }


def sweep_on_interrupted(job_id: int, params: JobParams) -> None:
    """Interrupt hook (sync): the worker died or shut down mid-sweep."""
    error = Job.objects.filter(pk=job_id).values_list("error", flat=True).first() or ""
    recording.sweep_finish(
        sweep_id=int(params["sweep_id"]),
        state=SweepState.INTERRUPTED,
        reason=f"interrupted: {error or 'its job worker stopped'}",
    )


def sweep_on_cancel_forced(job_id: int, params: JobParams) -> None:
    """Forced-cancel hook (sync): the sweep job ignored its cancel past the grace and its task
    was cancelled outright. The sweep ends cancelled, saying so; the level in progress stays
    as partial."""
    error = Job.objects.filter(pk=job_id).values_list("error", flat=True).first() or ""
    recording.sweep_finish(
        sweep_id=int(params["sweep_id"]),
        state=SweepState.CANCELLED,
        reason=error or "cancelled; did not stop within the grace; forced",
    )
