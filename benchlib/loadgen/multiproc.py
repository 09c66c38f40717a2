from __future__ import annotations

# A level split across worker processes (multiprocessing, spawn).
#
# Each worker runs C_i of the level's C slots with its own event loop and client, does its share of
# the warm-up, reports ready, and starts measuring at a wall-clock time the parent sets once every
# worker is ready. Workers send live samples and, at the end, their raw records; the parent merges
# the records exactly (merge.merge_results) and combines the samples. Given a RecordTarget, the
# workers instead append their records to its files as they complete (a batch at a time, each
# record in wall-clock time, which needs no merge) and hand back none.
import asyncio
import contextlib
import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from multiprocessing.sharedctypes import Synchronized
from typing import Any

from benchlib.loadgen.level import LevelRunner, RunnerSample, SampleCallback
from benchlib.loadgen.level_config import LevelConfig, LevelResult, share
from benchlib.loadgen.merge import merge_results
from benchlib.loadgen.prompts import PromptSource
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.recordstore import RecordTarget
from benchlib.stats.intervals import quantile

START_MARGIN_S = 0.2  # between the last worker reporting ready and the common start


def split_level(cfg: LevelConfig, processes: int) -> list[LevelConfig]:
    """Per-process configs: C_i slots each (C_i >= 1), disjoint slot ids and request indices."""
    n = max(1, min(processes, cfg.concurrency))
    out = []
    offset = 0
    for i in range(n):
        c = share(cfg.concurrency, i, n) or 0
        rate = cfg.request_rate / n if cfg.request_rate else None
        out.append(
            replace(
                cfg,
                concurrency=c,
                process_index=i,
                process_count=n,
                slot_offset=offset,
                request_rate=rate,
            )
        )
        offset += c
    return out


@dataclass(frozen=True, slots=True)
class _ParentLink:
    """How a worker process and the parent talk: the queue it reports on, the event that tells
    it to stop, the common start of the measured requests (0.0 until the parent sets it) and
    the parent's pid (a worker whose parent is gone stops)."""

    out_q: Any
    cancel_ev: Any
    start_at: Synchronized[float]
    pid: int


def _worker_main(
    cfg: LevelConfig, prompts: PromptSource, link: _ParentLink, records: RecordTarget | None
) -> None:
    # The parent owns signal handling and tells workers to stop through cancel_ev.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    idx = cfg.process_index
    try:
        result = asyncio.run(_worker(cfg, prompts, link, records))
        link.out_q.put(("done", idx, result))
    except BaseException:
        link.out_q.put(("error", idx, traceback.format_exc()))


async def _worker(
    cfg: LevelConfig, prompts: PromptSource, link: _ParentLink, records: RecordTarget | None
) -> LevelResult:
    idx = cfg.process_index
    out_q, cancel_ev, start_at = link.out_q, link.cancel_ev, link.start_at
    cancel = asyncio.Event()
    writers = records.open() if records is not None else []

    def sink(rec: RequestRecord, anchor: ClockAnchor) -> None:
        assert records is not None
        row = records.row(rec.to_json(anchor, level_index=cfg.level_index))
        for writer in writers:
            writer.write(row)

    runner = LevelRunner(
        cfg,
        prompts,
        cancel=cancel,
        on_sample=lambda s: out_q.put(("sample", idx, s)),
        sink=sink if records is not None else None,
    )

    async def watch() -> None:
        reported = False
        while True:
            for writer in writers:
                writer.flush_if_due()
            if cancel_ev.is_set() or os.getppid() != link.pid:
                cancel.set()
            if runner.failed.is_set() and not reported:
                out_q.put(("failed", idx, runner.reason))
                reported = True
            await asyncio.sleep(0.02)

    async def before_measure() -> None:
        out_q.put(("ready", idx, None))
        # A multiprocessing.Value cannot be awaited: poll it (2 ms, only while waiting to start).
        while start_at.value == 0.0 and not cancel.is_set():  # noqa: ASYNC110
            await asyncio.sleep(0.002)
        delay = start_at.value - time.time()
        if delay > 0 and not cancel.is_set():
            await asyncio.sleep(delay)

    watcher = asyncio.create_task(watch())
    try:
        return await runner.run(before_measure=before_measure)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
        for writer in writers:
            writer.close()


class _SampleMerger:
    """Sums the latest sample of every worker into one sample for the level.

    Workers tick on their own clocks, so a period may bring a fresh sample from only some of
    them: the others' previous sample (at most one period old) stands in for them.
    """

    def __init__(self) -> None:
        self.latest: dict[int, RunnerSample] = {}
        self.fresh = False

    def add(self, idx: int, sample: RunnerSample) -> None:
        self.latest[idx] = sample
        self.fresh = True

    def combined(self) -> RunnerSample | None:
        if not self.fresh:
            return None
        self.fresh = False
        samples = list(self.latest.values())
        ttfts = sorted(t for s in samples for t in s["recent_ttft"])
        return {
            "t": time.time(),
            "phase": samples[0]["phase"],
            "tok_s": sum(s["tok_s"] for s in samples),
            "in_flight": sum(s["in_flight"] for s in samples),
            "completed": sum(s["completed"] for s in samples),
            "errors": sum(s["errors"] for s in samples),
            "ttft_p50": quantile(ttfts, 0.5) if ttfts else None,
            "loop_lag_ms": max(s["loop_lag_ms"] for s in samples),
            "client_cpu": max(s["client_cpu"] for s in samples),
            "client_limited": any(s["client_limited"] for s in samples),
            "recent_ttft": ttfts,
            "processes": len(samples),
        }


async def run_level_multiprocess(
    cfg: LevelConfig,
    prompts: PromptSource,
    processes: int,
    *,
    cancel: asyncio.Event | None = None,
    on_sample: SampleCallback | None = None,
    before_measure: Callable[[], Awaitable[None]] | None = None,
    records: RecordTarget | None = None,
) -> LevelResult:
    """Run one level split over `processes` spawned workers; returns the merged result (with
    `records`, the workers append their records to its files and the result holds none).

    `before_measure` is awaited here once every worker has finished its share of the warm-up,
    before the common start of the measured requests is set."""
    cancel = cancel or asyncio.Event()
    configs = split_level(cfg, processes)
    ctx = mp.get_context("spawn")
    out_q = ctx.Queue()
    cancel_ev = ctx.Event()
    start_at = ctx.Value("d", 0.0)
    link = _ParentLink(out_q, cancel_ev, start_at, os.getpid())
    procs = [
        ctx.Process(
            target=_worker_main,
            args=(c, prompts, link, records),
            name=f"loadgen-worker-{c.process_index}",
            daemon=True,
        )
        for c in configs
    ]
    for p in procs:
        p.start()
    loop = asyncio.get_running_loop()
    results: dict[int, LevelResult] = {}
    errors: dict[int, str] = {}
    ready: set[int] = set()
    failure: str | None = None
    merger = _SampleMerger()
    next_sample = time.monotonic() + cfg.sample_interval
    try:
        while len(results) + len(errors) < len(procs):
            if cancel.is_set() and not cancel_ev.is_set():
                cancel_ev.set()
            try:
                kind, idx, payload = await loop.run_in_executor(None, out_q.get, True, 0.05)
            except queue.Empty:
                kind = ""
                idx, payload = -1, None
                for i, p in enumerate(procs):
                    if not p.is_alive() and i not in results and i not in errors:
                        with contextlib.suppress(queue.Empty):
                            while True:  # drain what it sent before dying
                                k2, i2, p2 = out_q.get_nowait()
                                _handle(k2, i2, p2, results, errors, ready, merger)
                        if i not in results and i not in errors:
                            errors[i] = f"worker process {i} exited with code {p.exitcode}"
            if kind:
                _handle(kind, idx, payload, results, errors, ready, merger)
                if kind == "failed" and failure is None:
                    failure = str(payload)
                    cancel_ev.set()
                if kind == "error":
                    cancel_ev.set()
            if len(ready) + len(results) + len(errors) >= len(procs) and start_at.value == 0.0:
                if before_measure is not None and not cancel_ev.is_set():
                    await before_measure()
                start_at.value = time.time() + START_MARGIN_S
            if time.monotonic() >= next_sample:
                next_sample += cfg.sample_interval
                combined = merger.combined()
                if combined is not None and on_sample is not None:
                    on_sample(combined)
    finally:
        cancel_ev.set()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
    if not results:
        return LevelResult(
            level_index=cfg.level_index,
            concurrency=cfg.concurrency,
            mode=cfg.mode,
            anchor=ClockAnchor.now(),
            status="failed",
            reason="; ".join(errors.values()) or "no worker finished",
        )
    merged = merge_results([results[i] for i in sorted(results)])
    merged.concurrency = cfg.concurrency
    if errors:
        merged.status = "failed"
        merged.reason = "; ".join(e.strip().splitlines()[-1] for e in errors.values())
    elif failure is not None and merged.status != "failed":
        merged.status = "failed"
        merged.reason = failure
    return merged


def _handle(
    kind: str,
    idx: int,
    payload: Any,
    results: dict[int, LevelResult],
    errors: dict[int, str],
    ready: set[int],
    merger: _SampleMerger,
) -> None:
    if kind == "sample":
        merger.add(idx, payload)
    elif kind == "ready":
        ready.add(idx)
    elif kind == "done":
        results[idx] = payload
    elif kind == "error":
        errors[idx] = str(payload)
