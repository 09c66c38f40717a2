"""The command line of ``python -m benchlib.loadgen``: its flags, and what they make.

The parser (the load settings' flags come from their one declaration, settings_args.py), and
what a run builds from the parsed flags before its first level: the trace replayed, the prompt
source, the SLO, the parameters echoed in ``run_start`` and a level's ``trace`` description.
Apart from the run itself (cli.py), which drives the levels and writes the event stream, so
that each can be read without the other.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import TypedDict

from benchlib.json_types import JsonObject
from benchlib.loadgen.datasets import builtin_prompts
from benchlib.loadgen.events import LevelTrace
from benchlib.loadgen.goodput import Slo
from benchlib.loadgen.prefixes import SharedPrefixPrompts
from benchlib.loadgen.prompts import PromptSource, load_dataset
from benchlib.loadgen.settings_args import add_load_arguments, settings_from_args
from benchlib.loadgen.traces import Trace, TracePrompts, load_trace

# --start-at further ahead than this is taken for a mistake (epoch milliseconds, a typo).
MAX_START_AHEAD_S = 7 * 24 * 3600.0


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected integers like 1,2,5,10: {text!r}") from exc
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("concurrency levels must be positive integers")
    return values


def start_epoch(text: str) -> float:
    """A --start-at value (flag or stdin line): epoch seconds, at most 7 days ahead."""
    try:
        value = float(text)
    except ValueError as exc:
        msg = f"expected epoch seconds like 1767225600.5: {text!r}"
        raise argparse.ArgumentTypeError(msg) from exc
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected positive epoch seconds: {text!r}")
    if value > time.time() + MAX_START_AHEAD_S:
        raise argparse.ArgumentTypeError(
            f"{text} is more than 7 days ahead (epoch seconds, not milliseconds?)"
        )
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchlib.loadgen",
        description="Closed-loop (or Poisson) streaming load against an LLM inference server.",
    )
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:30000")
    p.add_argument("--concurrency", type=_int_list, default=[1], help="levels, e.g. 1,2,5,10")
    add_load_arguments(p)
    p.add_argument("--extra-body", type=json.loads, default=None, help="JSON merged into bodies")
    p.add_argument("--dataset", type=Path, default=None)
    p.add_argument("--dataset-format", choices=["jsonl", "sharegpt"], default="jsonl")
    p.add_argument(
        "--trace-dir",
        type=Path,
        default=Path("."),
        help="folder a relative --trace is read from (a sweep: the dashboard's trace folder)",
    )
    p.add_argument("--processes", type=int, default=1, help="worker processes per level")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--drain-seconds", type=float, default=0.0, help="grace on cancel")
    p.add_argument("--on-server-error", choices=["stop", "continue"], default="stop")
    p.add_argument("--max-consecutive-connect-errors", type=int, default=10)
    p.add_argument("--max-error-ratio", type=float, default=0.5)
    p.add_argument("--sample-interval", type=float, default=1.0)
    p.add_argument("--output", type=Path, default=None, help="results JSON")
    p.add_argument(
        "--records",
        type=Path,
        default=None,
        help="per-request records, written as requests complete: JSON lines, or the compact "
        "format when the name ends in .sdrec",
    )
    p.add_argument(
        "--records-append",
        action="store_true",
        help="append to --records instead of replacing it (a resumed sweep keeps what exists)",
    )
    p.add_argument(
        "--level-index-base",
        type=int,
        default=0,
        help="index of the first level as the caller numbers them (a resumed sweep's offset)",
    )
    p.add_argument(
        "--attempt", type=int, default=None, help="attempt number written into every record"
    )
    p.add_argument(
        "--boundary-metrics-url",
        default=None,
        help="scrape this Prometheus URL after each level's warm-up, right before its first "
        "measured request, and right after its last response, and put the text in its "
        "measure_start / level_summary event (server_metrics_text): the server-side interval "
        "is then exactly the level's measured requests",
    )
    p.add_argument("--events", default=None, help="event stream: a path, or - for stdout")
    p.add_argument("--run-id", default=None)
    p.add_argument(
        "--start-at",
        type=start_epoch,
        default=None,
        help="epoch seconds (time.time() clock) at which the first level starts; "
        "starts at once when already past",
    )
    p.add_argument(
        "--start-at-stdin",
        action="store_true",
        help="after run_start, read the --start-at value as one line on stdin (a gang start "
        "given once every process of the gang is up); end of input cancels the run",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def trace_from_args(args: argparse.Namespace) -> Trace | None:
    """The --trace file read, windowed and scaled as the flags say (None: no trace)."""
    if not args.trace:
        return None
    trace = load_trace(args.trace_dir / args.trace, args.trace_format)
    return trace.replayed(
        speed=args.trace_speed, start=args.trace_start, duration=args.trace_duration
    )


def prompts_from_args(args: argparse.Namespace, trace: Trace | None = None) -> PromptSource:
    base: PromptSource
    if trace is not None:
        base = TracePrompts(trace, seed=args.seed)
    elif args.dataset is not None:
        base = load_dataset(args.dataset, args.dataset_format, seed=args.seed)
    else:
        base = builtin_prompts(args.prompt_set, seed=args.seed, input_tokens=args.input_tokens)
    if not args.prefix_count:
        return base
    return SharedPrefixPrompts(
        base, args.prefix_count, args.prefix_tokens, args.prefix_share, seed=args.seed
    )


def slo_from_args(args: argparse.Namespace) -> Slo | None:
    return settings_from_args(args).slo_target()


def run_params(args: argparse.Namespace) -> JsonObject:
    """The parsed flags as ``run_start`` and the results file echo them (paths as text)."""
    out: JsonObject = {}
    for key, value in vars(args).items():
        out[key] = str(value) if isinstance(value, Path) else value
    return out


class TraceEventFields(TypedDict, total=False):
    trace: LevelTrace


def trace_event(args: argparse.Namespace, trace: Trace | None) -> TraceEventFields:
    """What a level replays, for its level_start event (empty without a trace)."""
    if trace is None:
        return TraceEventFields()
    return TraceEventFields(
        trace=LevelTrace(
            file=str(args.trace),
            format=args.trace_format,
            speed=args.trace_speed,
            start=args.trace_start,
            duration=args.trace_duration,
            requests=len(trace.requests),
            rate=trace.rate(),
        )
    )
