"""A sweep level split across several load-generator processes (shards).

One load-generator process drives a bounded number of streams well (see
``make bench-loadgen``). With ``SPECDASH_LOADGEN_MAX_STREAMS`` set, a level of concurrency C
above it runs as ``ceil(C / max)`` shard processes, each with its share of C (and of the
request count), all told to start at one wall-clock instant (``--start-at``). Each shard writes
its own request records; the level summary is computed once, by
``benchlib.loadgen.metrics.summarize_level``, over the union of the records (never by
averaging the shards' summaries), and carries the per-shard split with every shard that fell
behind flagged (the shares, argv and merge: ``benchmarks.sweeps.split``). Unset, every
sweep runs exactly as before: one process for all its levels.

Shards run as children of the worker that owns the sweep job, or, with
``SPECDASH_LOADGEN_SHARD_JOBS=1``, as ``sweep.shard`` jobs that any worker on any machine
claims (``benchmarks.sweeps.shards``). Records are tied together through the wall clock, so
shards on several machines need synchronised clocks (NTP).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings

from benchlib.loadgen.cli_io import sleep_until
from benchlib.loadgen.events import LevelStartEvent, LevelSummaryEvent
from benchlib.loadgen.goodput import Slo
from benchlib.loadgen.level_config import share
from benchlib.loadgen.summary import LevelSummary
from benchmarks.sweeps import recording, store
from benchmarks.sweeps.events import SweepRecorder
from benchmarks.sweeps.models import SweepState
from benchmarks.sweeps.recordfile import disk_full, disk_full_reason, trim_torn_tail
from benchmarks.sweeps.runner import LoadgenProcess
from benchmarks.sweeps.shards import (
    PlacementError,
    RemoteShardProcess,
    gang_barrier,
    gang_timeout,
    shard_jobs_enabled,
    shard_placement,
)
from benchmarks.sweeps.shardset import ShardSet
from benchmarks.sweeps.split import (
    Shard,
    ShardLevel,
    merge_shard_levels,
    read_shard_records,
    shard_argv,
    shard_count,
)
from benchmarks.sweeps.supervisor import (
    Stopping,
    supervise,
    sweep_server_metrics,
    watch_instance,
)
from core.jobs import JobContext
from hosts.telemetry.levels import LevelServerMetrics

if TYPE_CHECKING:
    from benchmarks.sweeps.handler import SweepRunResult

logger = logging.getLogger(__name__)

# Between spawning the shards and their common start: a Python process takes about a second
# to import and connect on a busy machine. A shard that misses it starts late (and is flagged).
START_MARGIN_S = 2.0
# The opening /metrics scrape of a split level is taken this long before the shards' common
# start: a scrape answers in milliseconds; one still running at the start is flagged.
OPEN_LEAD_S = 0.25
# Between the last local shard saying it has warmed up and their common start: the start line
# reaches processes that are already waiting for it.
WARM_START_MARGIN_S = 0.5
STOP_GRACE_S = 20.0
INSTANCE_POLL_S = 1.0
# Shards: terminated together, given the grace to report the partial level, then each stopped
# in turn (terminate, 5 s, kill) and all killed on the way out, their readers gathered.
STOPPING = Stopping(
    drain_grace=STOP_GRACE_S,
    kill_on_overrun=False,
    exit_wait=0.0,
    reraise_reader_error=False,
    kill_on_leaving=True,
)


def max_streams() -> int:
    """Streams per load-generator process before a level is split (the
    ``SPECDASH_LOADGEN_MAX_STREAMS`` setting); 0: never split."""
    return max(0, int(settings.SPECDASH_LOADGEN_MAX_STREAMS))


def split_needed(levels: Sequence[int], load: dict[str, Any]) -> bool:
    if load.get("request_rate"):
        # Open-loop arrivals are one process's schedule: shards would each send the full rate.
        return False
    streams = max_streams()
    requests = load.get("requests_per_level")
    return any(shard_count(c, streams=streams, requests=requests) > 1 for c in levels)


async def _start_when_warm(ctx: JobContext, level: ShardSet) -> float:
    """Wait until every local shard has warmed up (or ended), then give them one start ahead
    on stdin (none on a cancel: the shards then end without measuring)."""
    while not ctx.cancelled.is_set():
        waiting = [
            s for s in level.shards
            if s.index not in level.warmed_up and s.index not in level.finished
        ]  # fmt: skip
        if not waiting:
            break
        await asyncio.sleep(0.05)
    start_at = time.time() + WARM_START_MARGIN_S
    for proc in level.procs:
        if isinstance(proc, LoadgenProcess):
            await proc.send_line(None if ctx.cancelled.is_set() else repr(start_at))
    return start_at


async def _run_level(
    ctx: JobContext,
    plan: recording.SweepPlan,
    recorder: SweepRecorder,
    server: LevelServerMetrics,
    index: int,
    concurrency: int,
) -> tuple[LevelSummary | None, str | None]:
    """Run one level as shards; (merged summary or None, why the sweep must stop or None)."""
    requests = plan.load.get("requests_per_level")
    n = shard_count(concurrency, streams=max_streams(), requests=requests)
    # Per attempt: a resumed level's shards never overwrite the files of an earlier run.
    base = plan.records_path.parent / f"level-{index}-attempt-{plan.attempt}"
    base.mkdir(parents=True, exist_ok=True)
    level = ShardSet(index, concurrency, [
        Shard(i, share(concurrency, i, n) or 0, share(requests, i, n), base / f"shard-{i}.jsonl")
        for i in range(n)
    ])  # fmt: skip
    as_jobs = shard_jobs_enabled()
    # Shard jobs are gang-started (their start is set once all are claimed and ready);
    # local children share the machine and can be given a start ahead right away, unless they
    # warm up first: then they are given it on stdin once every one of them has warmed up.
    local_warmup = not as_jobs and bool(plan.load.get("warmup_requests"))
    start_at: float | None = None if as_jobs or local_warmup else time.time() + START_MARGIN_S
    gang: dict[str, Any] = {}
    try:
        asks = (
            shard_placement(n=n, spread_key=f"sweep:{plan.sweep_id}:level:{index}")
            if as_jobs
            else []
        )
    except PlacementError as exc:
        return None, f"level {index} (C={concurrency}) cannot be placed: {exc}"
    for shard in level.shards:
        argv = shard_argv(
            base_url=plan.base_url,
            model=plan.model,
            load=plan.load,
            shard=shard,
            start_at=start_at,
            run_id=f"s{plan.sweep_id}-l{index}",
            engine=plan.engine,
        )
        if as_jobs:
            # Any worker meeting its placement, on any machine, may claim it; it reports
            # through its job row.
            level.procs.append(
                await RemoteShardProcess.start(
                    argv,
                    records_path=shard.records_path,
                    lock_key=f"sweep:{plan.sweep_id}:level:{index}:shard:{shard.index}",
                    gang=True,
                    **asks[shard.index],
                )
            )
        elif local_warmup:
            level.procs.append(
                await LoadgenProcess.start(
                    [*argv, "--start-at-stdin"], cwd=settings.BASE_DIR, stdin_pipe=True
                )
            )
        else:
            level.procs.append(await LoadgenProcess.start(argv, cwd=settings.BASE_DIR))
    if as_jobs:
        remote = [p for p in level.procs if isinstance(p, RemoteShardProcess)]
        try:
            start_at, waited = await gang_barrier(remote, wait_s=gang_timeout())
        except PlacementError as exc:
            return None, f"level {index} (C={concurrency}) cannot be placed: {exc}"
        gang = {"gang_wait_s": waited}
    started: LevelStartEvent = {
        "event": "level_start",
        "level_index": index,
        "concurrency": concurrency,
        "t": start_at or time.time(),
    }
    await recorder.handle(started)

    async def start_then_open(_reader: asyncio.Task[None]) -> None:
        nonlocal start_at
        if local_warmup:
            start_at = await _start_when_warm(ctx, level)
        assert start_at is not None
        # The shards warm up first and send their measured requests from start_at: the level's
        # server-side interval opens right before it (where, relative to it and to the end of
        # the shards' warm-up, is stored and checked with the level's server figures).
        await sleep_until(start_at - OPEN_LEAD_S, ctx.cancelled)
        await server.observe({"event": "measure_start", "level_index": index, "start_at": start_at})

    instance_id = plan.instance_id
    try:
        ending = await supervise(
            level,
            take=recorder.handle,
            cancelled=ctx.cancelled,
            stopping=STOPPING,
            # The lifecycle's state only, without its reason (as this path has always said it).
            crash_watch=(
                (lambda: watch_instance(instance_id, INSTANCE_POLL_S, with_reason=False))
                if instance_id is not None
                else None
            ),
            before_watch=start_then_open,
        )
    finally:
        await level.closed()
    stop_reason: str | None = None
    if ending.crash is not None:
        stop_reason = f"server crashed mid-sweep: {ending.crash}"
    elif ending.cancelled:
        stop_reason = "cancelled"
    await recorder.flush()
    parts = []
    for shard in level.shards:
        if shard.anchor is None:  # it died before reporting: nothing of it can be merged
            continue
        # File work only (no ORM), so any thread will do, like the torn-tail trim.
        records = await asyncio.to_thread(
            read_shard_records,
            shard,
            level_index=index,
            sweep_records=plan.records_path,
            attempt=plan.attempt,
        )
        parts.append(
            ShardLevel(
                index=shard.index,
                concurrency=shard.concurrency,
                anchor=shard.anchor,
                records=records,
                status=str(shard.summary.get("status") or "failed"),
                reason=shard.summary.get("reason"),
                client=dict(shard.summary.get("client") or {}),
                start_at=start_at,
                worker_id=shard.worker_id,
            )
        )
    if not parts:
        return None, stop_reason or "no load-generator shard reported the level"
    mode = str(level.shards[parts[0].index].summary.get("mode") or "closed")
    slo = Slo.from_dict(plan.load.get("slo"))
    summary = merge_shard_levels(parts, level_index=index, mode=mode, slo=slo)
    summary["split"].update(gang)
    tracked = [s.summary["controller"] for s in level.shards if s.summary.get("controller")]
    if tracked:
        # Shard 0 alone scrapes the server once a second (split.shard_argv).
        summary["controller"] = tracked[0]
    warmed = [s.warmed_at for s in level.shards if s.warmed_at is not None]
    summary["split"]["warmed_at"] = max(warmed) if warmed else None
    if len(parts) < n:
        summary["status"] = "failed"
        summary["reason"] = f"{n - len(parts)} of {n} shards reported nothing"
    if stop_reason is None and summary["status"] == "failed":
        stop_reason = f"load generator stopped the sweep: {summary.get('reason')}"
    return summary, stop_reason


async def run_split_sweep(ctx: JobContext, plan: recording.SweepPlan) -> SweepRunResult:
    """The ``sweep.run`` job for a sweep with split levels: level by level, shards started
    together, merged summary recorded as the level's. Ends the sweep like the one-process
    path does (completed, cancelled, failed; interrupted is the worker's interrupt hook)."""
    recorder = SweepRecorder(plan.sweep_id)
    server = sweep_server_metrics(plan)
    finish = store.asweep_finish
    state, reason = SweepState.COMPLETED, ""
    try:
        for index, concurrency in enumerate(plan.levels, start=plan.level_offset):
            if ctx.cancelled.is_set():
                state, reason = SweepState.CANCELLED, "cancelled"
                break
            summary, stop = await _run_level(ctx, plan, recorder, server, index, concurrency)
            if summary is not None:
                event: LevelSummaryEvent = {
                    "event": "level_summary",
                    "level_index": index,
                    "summary": summary,
                }
                await recorder.handle(event)
                # the server's own figures for exactly this level, after its shards' warm-up
                warmed_at = summary["split"].get("warmed_at")
                await server.observe(event | {"warmed_at": warmed_at})
            if stop is not None:
                state = SweepState.CANCELLED if stop == "cancelled" else SweepState.FAILED
                reason = stop
                break
    except OSError as exc:
        state, reason = SweepState.FAILED, f"could not start the load generator: {exc}"
    if state == SweepState.FAILED and disk_full(reason):
        # A shard's own writes or the merge into the sweep's file hit a full disk: said as on
        # the one-process path, not as the error text it surfaced in.
        reason = disk_full_reason(plan.records_path)
    # A merge cut mid-record leaves whole lines only, so a resume appends after them.
    await asyncio.to_thread(trim_torn_tail, Path(plan.records_path))
    await finish(sweep_id=plan.sweep_id, state=state, reason=reason)
    return {
        "sweep_id": plan.sweep_id,
        "state": state,
        "reason": reason,
        "levels_finished": recorder.levels_finished,
        "split": True,
    }


__all__ = ["max_streams", "run_split_sweep", "split_needed"]
