from __future__ import annotations

# `python -m benchlib.loadgen`: run levels of load, write results, events and records.
#
# Exit status: 0 when the run completed or was cancelled (SIGTERM/SIGINT), 3 when it failed (the
# server-error policy stopped it, or a level could not run), 2 for bad arguments.
# Its flags and what they make are in cli_args.py; a level's summary in level_summary.py.
import argparse
import asyncio
import contextlib
import json
import math
import os
import signal
import sys
import time
import traceback
import uuid
from typing import TYPE_CHECKING, TextIO

from benchlib.json_types import JsonObject
from benchlib.loadgen.apis import Api
from benchlib.loadgen.cli_args import (
    build_parser,
    prompts_from_args,
    run_params,
    start_epoch,
    trace_event,
    trace_from_args,
)
from benchlib.loadgen.cli_io import (
    LevelRecords,
    boundary_scrape,
    progress_line,
    sleep_until,
    stdin_line,
    summary_line,
    write_output,
)
from benchlib.loadgen.events import (
    BoundaryFields,
    EventWriter,
    LevelStartEvent,
    LevelSummaryEvent,
    LoadgenEvent,
    MeasureStartEvent,
    RunStartEvent,
    StartGivenEvent,
    boundary_fields,
    check_event,
    dumps,
    silence_stdout,
)
from benchlib.loadgen.level import RecordSink, RunnerSample, run_level
from benchlib.loadgen.level_config import LevelConfig, level_plan
from benchlib.loadgen.level_summary import level_summary
from benchlib.loadgen.multiproc import run_level_multiprocess
from benchlib.loadgen.ramp import slice_figures
from benchlib.loadgen.served import ModelDiscoveryError, discover_model
from benchlib.loadgen.settings_args import settings_from_args
from benchlib.loadgen.summary import LevelSummary

if TYPE_CHECKING:
    from benchlib.loadgen.controller import ControllerTracker

EXIT_OK = 0
EXIT_FAILED = 3


class _Stop:
    """The run's cancel event and why it was set (the first reason wins)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.reason = "cancelled"

    def set(self, reason: str) -> None:
        if not self.event.is_set():
            self.reason = reason
            self.event.set()


async def run(args: argparse.Namespace, events: EventWriter, log: TextIO | None) -> int:
    loop = asyncio.get_running_loop()
    stop = _Stop()
    cancel = stop.event
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set, "cancelled by signal")
    # The reader of --events - gone (a killed dashboard worker): cancel like SIGTERM.
    events.on_broken = lambda: stop.set("event stream closed by its reader")
    watcher = asyncio.create_task(events.watch())

    def say(line: str) -> None:
        nonlocal log
        if log is None:
            return
        try:
            print(line, file=log, flush=True)
        except (OSError, ValueError):
            log = None  # progress is optional: a closed stderr must not stop the run

    run_id = args.run_id or uuid.uuid4().hex[:12]
    trace = trace_from_args(args)
    prompts = prompts_from_args(args, trace)
    # The run starts now: asking the server for its model below is part of it.
    started = time.time()
    discovery_error = None
    if not args.model:
        # SGLang's /generate needs no model name; the OpenAI APIs do.
        args.model = ""
        if args.api != Api.GENERATE.value:
            try:
                args.model = await discover_model(args.base_url)
                say(f"[model {args.model!r}, from {args.base_url}/v1/models]")
            except ModelDiscoveryError as exc:
                discovery_error = f"no model name to send: {exc}"
    settings = settings_from_args(args)
    slo = settings.slo_target()
    params = run_params(args)
    start: StartGivenEvent | None = None
    if args.start_at is not None:
        # How far in the past the requested start already was (0 when it is still ahead).
        late = max(0.0, started - args.start_at)
        start = _start_given(args.start_at, late)
    opening: RunStartEvent = {
        "event": "run_start",
        "run_id": run_id,
        "t": started,
        "params": params,
        "pid": os.getpid(),
    }
    if start is not None:
        opening["start_at"] = start["start_at"]
        opening["start_at_passed"] = start["start_at_passed"]
        opening["start_at_late_s"] = start["start_at_late_s"]
    events.emit(opening)

    async def read_start() -> None:
        nonlocal start
        given = (await stdin_line(cancel)).strip()
        try:
            args.start_at = start_epoch(given) if given else None
        except argparse.ArgumentTypeError as exc:
            say(f"[bad start on stdin: {exc}]")
            args.start_at = None
        if args.start_at is None:
            stop.set("no start was given")
        else:
            late = max(0.0, time.time() - args.start_at)
            start = _start_given(args.start_at, late)
            events.emit(start)

    # A gang member with warm-up requests warms up first and only then asks for its start (its
    # `warmed_up` event says it is ready), so that every member's warm-up is over at the common
    # start, where the level's server-side interval opens.
    start_after_warmup = bool(args.start_at_stdin and args.warmup_requests)
    if args.start_at_stdin and not start_after_warmup:
        # Imported, connected to its reader, prompts built: only the start is missing, so
        # the processes of a gang are all ready when it is given and start within a timer tick.
        await read_start()
    records = LevelRecords(args.records, append=args.records_append, attempt=args.attempt)
    flusher = asyncio.create_task(records.flush_periodically())
    levels: list[LevelSummary] = []
    status, reason = "completed", None
    # The level's per-second /metrics scrape (--controller-tracking), from its opening on.
    tracker: ControllerTracker | None = None
    try:
        if discovery_error is not None:
            events.emit(
                {
                    "event": "level_error",
                    "level_index": args.level_index_base,
                    "reason": discovery_error,
                }
            )
            say(discovery_error)
            status, reason = "failed", discovery_error
        # A common start (processes on several machines) applies to the measured requests:
        # the first level's warm-up, if it has one, runs before it, so that it is over when
        # the level's server-side interval opens.
        wait_for = None
        if (
            args.start_at is not None
            and start is not None
            and not start["start_at_passed"]
            and discovery_error is None
        ):
            wait_for = args.start_at
            if not args.warmup_requests:
                say(f"[waiting {wait_for - time.time():.1f}s for --start-at {wait_for}]")
                await sleep_until(wait_for, cancel)
                wait_for = None
        plan = (
            [] if discovery_error is not None else level_plan(args.concurrency, args.request_rate)
        )
        for i, (c, rate) in enumerate(plan, start=args.level_index_base):
            if cancel.is_set():
                status, reason = "cancelled", stop.reason
                break
            cfg = LevelConfig.from_settings(
                settings.model_copy(update={"model": args.model}),
                base_url=args.base_url,
                concurrency=c,
                request_rate=rate,
                level_index=i,
                extra_body=args.extra_body,
                seed=args.seed,
                drain_seconds=args.drain_seconds,
                on_server_error=args.on_server_error,
                max_consecutive_connect_errors=args.max_consecutive_connect_errors,
                max_error_ratio=args.max_error_ratio,
                sample_interval=args.sample_interval,
                run_id=run_id,
                trace=trace,
            )
            processes = max(1, min(args.processes, c))
            level_start: LevelStartEvent = {
                "event": "level_start",
                "level_index": i,
                "concurrency": c,
                "t": time.time(),
                "requests": args.requests_per_level,
                "duration": args.duration,
                "warmup_requests": args.warmup_requests,
                "request_rate": rate,
                "burstiness": args.burstiness,
                "processes": processes,
            }
            replayed = trace_event(args, trace)
            if replayed:
                level_start["trace"] = replayed["trace"]
            events.emit(level_start)

            def on_sample(s: RunnerSample, i: int = i, c: int = c) -> None:
                figures = {k: v for k, v in s.items() if k != "recent_ttft"}
                events.emit(_sample_event(i, c, figures))
                say(progress_line(i, c, s))

            async def open_interval(i: int = i, c: int = c) -> None:
                # After the warm-up, right before the first measured request: the level's
                # server-side interval opens here, so it counts the measured requests only.
                nonlocal wait_for, start_after_warmup, tracker
                warmed_at = time.time()
                if start_after_warmup:
                    start_after_warmup = False
                    events.emit({"event": "warmed_up", "level_index": i, "t": warmed_at})
                    await read_start()
                    if args.start_at is not None and start and not start["start_at_passed"]:
                        wait_for = args.start_at
                if wait_for is not None:
                    say(f"[waiting {wait_for - warmed_at:.1f}s for --start-at {wait_for}]")
                    await sleep_until(wait_for, cancel)
                    wait_for = None
                if cancel.is_set():
                    return  # no measured request follows: the level opens nothing
                boundary = (
                    boundary_fields(await boundary_scrape(args.boundary_metrics_url))
                    if args.boundary_metrics_url
                    else BoundaryFields()
                )
                if args.controller_tracking:
                    # Imported here: httpx is only loaded by the paths that need it.
                    from benchlib.loadgen.controller import ControllerTracker

                    tracker = ControllerTracker(
                        args.boundary_metrics_url or args.base_url.rstrip("/") + "/metrics"
                    )
                    tracker.start()
                # The scrape's keys before the level's, as the line has always had them; mypy's
                # extra checks want every optional key of the event in a ** item.
                events.emit(
                    MeasureStartEvent(
                        event="measure_start",
                        **boundary,  # type: ignore[typeddict-item]
                        level_index=i,
                        concurrency=c,
                        warmed_at=warmed_at,
                        t=time.time(),
                    )
                )

            sink: RecordSink = records.sink(run_id=run_id, level_index=i)
            tracker = None
            try:
                if processes > 1:
                    result = await run_level_multiprocess(
                        cfg,
                        prompts,
                        processes,
                        cancel=cancel,
                        on_sample=on_sample,
                        before_measure=open_interval,
                        records=records.target(),
                    )
                else:
                    result = await run_level(
                        cfg,
                        prompts,
                        cancel=cancel,
                        on_sample=on_sample,
                        before_measure=open_interval,
                        sink=sink,
                    )
            except Exception as exc:
                if tracker is not None:
                    await tracker.stop()
                reason = f"level {i} could not run: {type(exc).__name__}: {exc}"
                detail = traceback.format_exc()[-2000:]
                events.emit(
                    {"event": "level_error", "level_index": i, "reason": reason, "detail": detail}
                )
                status = "failed"
                break
            # A split level's workers hand back their records at its end: they go to the
            # file now, the same way.
            for rec in (*result.warmup_records, *result.records):
                sink(rec, result.anchor)
            records.flush()
            stored = records.level_source(result.anchor)
            summary = level_summary(result, processes=processes, slo=slo, stored=stored)
            summary["target_rate"] = rate
            summary["burstiness"] = args.burstiness if rate else None
            if cfg.ramp and rate and cfg.ramp_start_rate is not None:
                summary["ramp"] = {
                    "strategy": cfg.ramp,
                    "start_rate": cfg.ramp_start_rate,
                    "end_rate": rate,
                    "slices": slice_figures(
                        # The records as written: a streamed level keeps none in memory.
                        stored(),
                        slices=args.ramp_slices,
                        start_rate=cfg.ramp_start_rate,
                        end_rate=rate,
                        strategy=cfg.ramp,
                    ),
                }
            if tracker is not None:
                summary["controller"] = await tracker.stop()
            levels.append(summary)
            # The level's closing scrape, before the next level can send anything.
            boundary = (
                boundary_fields(await boundary_scrape(args.boundary_metrics_url))
                if args.boundary_metrics_url
                else BoundaryFields()
            )
            closing: LevelSummaryEvent = {
                "event": "level_summary",
                "level_index": i,
                "summary": summary,
            }
            events.emit({**closing, **boundary})
            say(summary_line(summary))
            if result.status == "failed":
                events.emit({"event": "level_error", "level_index": i, "reason": result.reason})
                if args.on_server_error == "stop":
                    status, reason = "failed", result.reason
                    break
            elif result.status == "cancelled":
                status, reason = "cancelled", stop.reason
                break
    finally:
        watcher.cancel()
        flusher.cancel()
        await asyncio.gather(watcher, flusher, return_exceptions=True)
        records.close()
    if args.output is not None:
        out = {
            "run_id": run_id,
            "status": status,
            "reason": reason,
            "started_at": started,
            "finished_at": time.time(),
            "params": params,
            "levels": levels,
        }
        write_output(args.output, json.dumps(json.loads(dumps(out)), indent=1) + "\n")
    events.emit(
        {
            "event": "run_end",
            "status": status,
            "reason": reason,
            "t": time.time(),
            "levels": len(levels),
        }
    )
    return EXIT_FAILED if status == "failed" else EXIT_OK


def _start_given(start_at: float, late: float) -> StartGivenEvent:
    return {
        "event": "start_given",
        "start_at": start_at,
        "start_at_passed": late > 0,
        "start_at_late_s": late,
    }


def _sample_event(level_index: int, concurrency: int, figures: JsonObject) -> LoadgenEvent:
    """A sample as the event, its figures in the order the level runner (or the merge of a
    split level's processes) gives them: checked against SampleEvent rather than rebuilt key
    by key, so the line's bytes stay as they were."""
    return check_event(
        {"event": "sample", "level_index": level_index, "concurrency": concurrency, **figures}
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.processes < 1:
        build_parser().error("--processes must be >= 1")
    if not (math.isfinite(args.burstiness) and args.burstiness > 0):
        build_parser().error("--burstiness must be a positive number")
    try:
        level_plan(args.concurrency, args.request_rate)
    except ValueError as exc:
        build_parser().error(str(exc))
    try:
        settings_from_args(args)  # the same rules as a sweep's settings, said per flag
        prompts_from_args(
            args, trace_from_args(args)
        )  # a missing dataset package or a bad file: a clear error, not a traceback
    except (ValueError, OSError) as exc:
        build_parser().error(str(exc))
    log: TextIO | None = None if args.quiet else sys.stderr
    stream: TextIO | None
    if args.events == "-":
        stream = sys.stdout
    elif args.events:
        stream = open(args.events, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    else:
        stream = None
    events = EventWriter(stream)
    try:
        return asyncio.run(run(args, events, log))
    finally:
        events.close()
        if events.broken and stream is sys.stdout:
            silence_stdout()
        if stream is not None and stream is not sys.stdout:
            with contextlib.suppress(OSError):
                stream.close()
