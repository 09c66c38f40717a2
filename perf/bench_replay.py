from __future__ import annotations

# Trace replay timing: how close to the (scaled) trace's arrival times the load generator sends.
#
#     .venv/bin/python -m perf.bench_replay [--requests N] [--rate R] [--no-pin]
#
# A bursty trace (gamma gaps of shape 0.5, the CV of 1.4 production traces show) of N requests
# at R req/s is written in Mooncake's JSONL format, read back by the loader, and replayed against
# the simulator (profile fast) by one load-generator process: at 1x over its first 20 s, and at
# 10x whole. Per replay: each request's lateness (its send, `start`, minus the time the trace had
# it arrive, `scheduled`), the SSE chunks per second the client took in, its loop lag and CPU.
# Targets: lateness p99 within 5 ms at 1x; at 10x the same, with the chunk rate inside the
# client's stated capacity (perf/bench_loadgen.py CAPACITY_TARGET chunks/s per process, the rate
# at which the TTFT it adds stays under 5 ms at p99). Exit status 0 when every target passes.
import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from benchlib.loadgen.apis import Api
from benchlib.loadgen.level import run_level
from benchlib.loadgen.level_config import LevelConfig
from benchlib.loadgen.traces import TracePrompts, load_trace
from benchlib.stats.intervals import quantile
from perf.bench_loadgen import CAPACITY_TARGET, MODEL, _cores, _verdict, simulator

LATENESS_P99_MS = 5.0
BURSTINESS = 0.5
INPUT_TOKENS = 64
OUTPUT_TOKENS = 32
WINDOW_1X_S = 20.0
# A cap the replay should never reach (its peak in flight is printed): a request held for a
# free slot would be late by the server's doing, not the client's timing.
MAX_IN_FLIGHT = 4096
# The simulator admits every stream at once (its default batch would queue them server-side).
SIM_FLAGS = ("--max-running", str(MAX_IN_FLIGHT))


def write_trace(path: Path, requests: int, rate: float, seed: int) -> None:
    """A Mooncake-format trace: gamma gaps, milliseconds, one shared first block (a system
    prompt) and one block of its own per request."""
    rng = random.Random(seed)
    t = 0.0
    with path.open("w", encoding="utf-8") as f:
        for i in range(requests):
            row = {
                "timestamp": round(t * 1000.0),
                "input_length": INPUT_TOKENS,
                "output_length": OUTPUT_TOKENS,
                "hash_ids": [0, i + 1],
            }
            f.write(json.dumps(row) + "\n")
            t += rng.gammavariate(BURSTINESS, 1.0 / (rate * BURSTINESS))


async def replay(url: str, path: Path, speed: float, duration: float | None) -> dict[str, Any]:
    trace = load_trace(path, "mooncake").replayed(speed=speed, duration=duration)
    cfg = LevelConfig(
        api=Api.COMPLETIONS,
        base_url=url,
        model=MODEL,
        concurrency=MAX_IN_FLIGHT,
        num_requests=len(trace.requests),
        ignore_eos=True,
        trace=trace,
        run_id=f"replay-{speed:g}x",
    )
    result = await run_level(cfg, TracePrompts(trace))
    ok = [r for r in result.records if r.ok]
    late_ms = sorted((r.start - (r.scheduled or r.start)) * 1e3 for r in result.records)
    first = min(r.start for r in result.records)
    last = max(r.end for r in result.records)
    chunks = sum(len(r.chunk_times) for r in ok)
    edges = sorted([(r.start, 1) for r in result.records] + [(r.end, -1) for r in result.records])
    in_flight = peak = 0
    for _, step in edges:
        in_flight += step
        peak = max(peak, in_flight)
    return {
        "speed": speed,
        "requests": len(result.records),
        "ok": len(ok),
        "rate": trace.rate(),
        "late_p50": quantile(late_ms, 0.5),
        "late_p99": quantile(late_ms, 0.99),
        "late_max": late_ms[-1],
        "chunks_s": chunks / (last - first) if last > first else 0.0,
        "lag_p99": result.client["loop_lag_ms"]["p99"],
        "cpu": result.client["cpu_pct"]["mean"],
        "status": result.status,
        "peak": peak,
    }


async def _main(args: argparse.Namespace) -> int:
    cores = (None, None) if args.no_pin else _cores()
    if cores[1] is not None:
        os.sched_setaffinity(0, {cores[1]})
        print(f"simulator pinned to core {cores[0]}, load generator to core {cores[1]}")
    else:
        print("not pinned (fewer than two cores or no taskset)")
    print(
        f"trace: {args.requests} requests, gamma gaps (shape {BURSTINESS:g}) at {args.rate:g} "
        f"req/s, {INPUT_TOKENS} tokens in, {OUTPUT_TOKENS} out; one process; client capacity "
        f"{CAPACITY_TARGET:,.0f} chunks/s"
    )
    # A shared machine's load shows in every lateness figure: say it beside them.
    print("load average at start: " + ", ".join(f"{v:.1f}" for v in os.getloadavg()))
    print(
        f"{'speed':>5} {'requests':>8} {'ok':>5} {'req/s':>7} {'late p50 ms':>11} {'p99':>6} "
        f"{'max':>6} {'chunks/s':>9} {'peak C':>6} {'loop lag p99':>12} {'cpu%':>5}  verdict"
    )
    started = time.monotonic()
    verdicts: list[bool] = []
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as d:
        tmp = Path(d)
        path = tmp / "trace.jsonl"
        write_trace(path, args.requests, args.rate, args.seed)
        with simulator("fast", tmp, cores[0], *SIM_FLAGS) as (url, _truth, _pid):
            for speed, window in ((1.0, WINDOW_1X_S), (10.0, None)):
                row = await replay(url, path, speed, window)
                ok = (
                    row["late_p99"] <= LATENESS_P99_MS
                    and row["ok"] == row["requests"]
                    and row["peak"] < MAX_IN_FLIGHT
                )
                notes = []
                if speed > 1:
                    within = row["chunks_s"] <= CAPACITY_TARGET
                    notes.append("within capacity" if within else "over capacity")
                    ok = ok and within
                verdicts.append(ok)
                print(
                    f"{speed:>4g}x {row['requests']:>8} {row['ok']:>5} {row['rate']:>7.1f} "
                    f"{row['late_p50']:>11.2f} {row['late_p99']:>6.2f} {row['late_max']:>6.2f} "
                    f"{row['chunks_s']:>9.0f} {row['peak']:>6} {row['lag_p99']:>12.2f} "
                    f"{row['cpu']:>5.0f}  "
                    f"{_verdict(ok)} {' '.join(notes)}"
                )
    passed = all(verdicts)
    print("load average at end: " + ", ".join(f"{v:.1f}" for v in os.getloadavg()))
    print(
        f"\n{sum(verdicts)}/{len(verdicts)} checks passed in {time.monotonic() - started:.0f} s "
        f"(lateness p99 target {LATENESS_P99_MS:g} ms): {_verdict(passed)}"
    )
    return 0 if passed else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perf.bench_replay")
    p.add_argument("--requests", type=int, default=2000, help="requests in the trace")
    p.add_argument("--rate", type=float, default=20.0, help="the trace's mean req/s at 1x")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-pin", action="store_true", help="do not pin server and client to cores")
    return asyncio.run(_main(p.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
