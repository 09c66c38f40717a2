from __future__ import annotations

# An A/B experiment on a replayed trace, judged by the decision object.
#
#     .venv/bin/python -m perf.bench_trace_ab [--repeats 2] [--levels 8,64] [--speed 2]
#     .venv/bin/python -m perf.bench_trace_ab --write-trace   # rewrites the trace file
#
# The trace is perf/traces/ab_mooncake.jsonl, a small Mooncake-format trace the project writes
# (written by --write-trace from a fixed seed, committed so the experiment replays the same
# file): 160 requests over about 40 s with gamma gaps of shape 0.5 (bursty), input lengths of 1
# to 4 blocks of 512 tokens whose first block is one of 4 shared system prompts on 70% of
# requests (hash ids repeat where prompts share blocks), output lengths 32 to 256.
#
# Arms: the simulator's `baseline` profile (A, reference) against its `eagle3` profile (B, the
# candidate, speculative), each run a fresh simulator process, in the default experiment
# protocol's order (A B B A for 2 repeats). A run replays the whole trace once per level, a level
# being the concurrency cap on requests in flight (as an experiment's levels are when it replays
# a trace), at `--speed` (2: twice the recorded rate). A trace is open-loop arrivals, so each
# level is decided as a comparison decides a fixed-rate level: on TPOT p50 (reference over
# candidate, above 1 favours the candidate), with the interval from the repeats and the arms'
# drift held against the margin (benchlib.stats.decision, as the dashboard's comparison does).
# Printed: each run's figures per level, the ratios, and the decision's statements. Nothing is
# tuned to pass; exit status 0 when the decision was made (whatever it says).
import argparse
import asyncio
import json
import math
import random
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchlib.loadgen.apis import Api
from benchlib.loadgen.level import run_level
from benchlib.loadgen.level_config import LevelConfig
from benchlib.loadgen.metrics import summarize_level
from benchlib.loadgen.traces import TracePrompts, load_trace
from benchlib.stats.decision import Arm, Decision
from benchlib.stats.decision_rule import decide_curves
from benchlib.stats.drift import Run, experiment_drift, level_drift
from benchlib.stats.types import Curve, LevelSample
from perf.bench_aa import interleaved_order
from perf.bench_loadgen import MODEL, simulator

TRACE = Path(__file__).resolve().parent / "traces" / "ab_mooncake.jsonl"
ARMS = {"A": "baseline", "B": "eagle3"}
FIGURE = "tpot_p50_ms"
TRACE_REQUESTS = 160
TRACE_RATE = 4.0  # req/s, the recorded mean
BURSTINESS = 0.5
BLOCK = 512
SYSTEM_PROMPTS = 4
SHARED = 0.7


def write_trace(path: Path, *, seed: int = 35) -> None:
    """The experiment's trace in Mooncake's format (see the module's notes)."""
    rng = random.Random(seed)
    t = 0.0
    next_block = SYSTEM_PROMPTS
    lines = []
    for _ in range(TRACE_REQUESTS):
        blocks = rng.randint(1, 4)
        hashes = []
        if rng.random() < SHARED:
            hashes.append(rng.randrange(SYSTEM_PROMPTS))
        while len(hashes) < blocks:
            hashes.append(next_block)
            next_block += 1
        # The last block is partly used: the prompt ends inside it.
        input_length = (blocks - 1) * BLOCK + rng.randint(64, BLOCK)
        row = {
            "timestamp": round(t * 1000.0),
            "input_length": input_length,
            "output_length": rng.randint(32, 256),
            "hash_ids": hashes,
        }
        lines.append(json.dumps(row))
        t += rng.gammavariate(BURSTINESS, 1.0 / (TRACE_RATE * BURSTINESS))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


@dataclass(frozen=True)
class LevelFigures:
    tpot_p50_ms: float
    ttft_p50_ms: float
    output_tok_s: float
    ok: int


@dataclass(frozen=True)
class RunFigures:
    arm: str
    repeat: int
    position: int
    levels: dict[int, LevelFigures]


async def _replay(url: str, cap: int, speed: float, run_id: str) -> LevelFigures:
    trace = load_trace(TRACE, "mooncake").replayed(speed=speed)
    cfg = LevelConfig(
        api=Api.COMPLETIONS, base_url=url, model=MODEL, concurrency=cap,
        num_requests=len(trace.requests), ignore_eos=True, trace=trace, run_id=run_id,
    )  # fmt: skip
    result = await run_level(cfg, TracePrompts(trace))
    summary = summarize_level(result.records, concurrency=cap, mode="rate", anchor=result.anchor)
    tpot, ttft = summary["tpot_ms"]["p50"], summary["ttft_ms"]["p50"]
    tok_s = summary.get("output_tok_s")
    if tpot is None or ttft is None or tok_s is None:
        raise RuntimeError(f"{run_id}: no completed requests")
    return LevelFigures(float(tpot), float(ttft), float(tok_s), summary["requests"]["ok"])


async def _run(
    args: argparse.Namespace, tmp: Path, arm: str, repeat: int, position: int
) -> RunFigures:
    profile = ARMS[arm]
    levels = {}
    with simulator(profile, tmp, None, "--http", "lean", seed=100 + position) as (url, _, _):
        for cap in args.levels:
            levels[cap] = await _replay(url, cap, args.speed, f"ab-{arm}{repeat}-c{cap}")
    return RunFigures(arm, repeat, position, levels)


def decision_of(runs: list[RunFigures], levels: list[int]) -> Decision:
    """The decision on TPOT p50 per level, B against A, as a fixed-rate comparison decides."""

    def figures(arm: str, c: int) -> list[float]:
        return [getattr(r.levels[c], FIGURE) for r in runs if r.arm == arm]

    curves = [
        Curve(ARMS[a], tuple(LevelSample.from_repeats(c, figures(a, c)) for c in levels))
        for a in ("A", "B")
    ]
    drift = experiment_drift(
        [
            level_drift(
                c,
                [Run(r.position, r.arm, r.repeat, getattr(r.levels[c], FIGURE)) for r in runs],
                reference="A",
                candidate="B",
            )
            for c in levels
        ]
    )
    return decide_curves(
        curves[0], curves[1], figure=FIGURE, rate_mode=True,
        drift=dict.fromkeys(levels, drift) if drift is not None else None,
        arms=(Arm(ARMS["A"], "A"), Arm(ARMS["B"], "B", speculative=True)),
    )  # fmt: skip


async def main_async(args: argparse.Namespace) -> int:
    trace = load_trace(TRACE, "mooncake")
    print(f"trace {TRACE.relative_to(Path.cwd()) if TRACE.is_relative_to(Path.cwd()) else TRACE}: "
          f"{len(trace.requests)} requests over {trace.span:.1f} s ({trace.rate():.2f} req/s), "
          f"replayed at {args.speed:g}x; levels (caps on in flight) {args.levels}; "
          f"A={ARMS['A']}, B={ARMS['B']}, {args.repeats} repeats")  # fmt: skip
    runs = []
    with tempfile.TemporaryDirectory(prefix="specdash-trace-ab-") as tmp:
        for position, (arm, repeat) in enumerate(interleaved_order(args.repeats)):
            started = time.monotonic()
            run = await _run(args, Path(tmp), arm, repeat, position)
            runs.append(run)
            per = "; ".join(
                f"C={c}: TPOT p50 {lv.tpot_p50_ms:.2f} ms, TTFT p50 {lv.ttft_p50_ms:.1f} ms, "
                f"{lv.output_tok_s:.1f} tok/s, {lv.ok} ok"
                for c, lv in run.levels.items()
            )
            print(f"  run {position + 1} {arm} ({ARMS[arm]}): {per} "
                  f"[{time.monotonic() - started:.1f} s]", flush=True)  # fmt: skip
    for c in args.levels:
        means = {
            a: statistics.fmean(getattr(r.levels[c], FIGURE) for r in runs if r.arm == a)
            for a in ("A", "B")
        }
        print(f"  C={c}: TPOT p50 mean A {means['A']:.2f} ms, B {means['B']:.2f} ms, "
              f"A/B {means['A'] / means['B']:.3f}")  # fmt: skip
    decision = decision_of(runs, args.levels)
    print("decision:")
    for level in decision.levels:
        r = level.ratio
        interval = (
            f"{r.low:.3f}-{r.high:.3f}" if r.low is not None and r.high is not None else "none"
        )
        point = f"{r.point:.3f}" if r.point is not None and math.isfinite(r.point) else "-"
        print(f"  C={level.concurrency}: {level.status}, ratio {point}, interval {interval}")
    for sentence in decision.statements():
        print(f"  {sentence}")
    return 0


def _levels(text: str) -> list[int]:
    return [int(p) for p in text.split(",") if p.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--levels", type=_levels, default=[8, 64])
    p.add_argument("--speed", type=float, default=2.0)
    p.add_argument("--write-trace", action="store_true", help="rewrite the trace file and stop")
    args = p.parse_args(argv)
    if args.write_trace:
        write_trace(TRACE)
        print(f"wrote {TRACE}")
        return 0
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    raise SystemExit(main())
