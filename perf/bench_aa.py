from __future__ import annotations

# A/A calibration of the comparison's statuses, and a known difference found.
#
#     .venv/bin/python -m perf.bench_aa [--experiments 10] [--levels 1,2,4,8]
#
# The same simulated profile as both arms, run by the experiment protocol (a fresh simulator
# process per run, closed-loop levels from the load generator library, the level's output tok/s
# per run), judged by the decision object (benchlib.stats.decision) exactly as a comparison is:
#
# * A/A, default protocol (2 repeats per arm, A B B A; interval from the repeats, drift from
#   each arm's first and last run): the share of levels *ahead* or *behind* (target <= 5%).
# * A/A, single-run mode (A then B, one run each; interval from a bootstrap over the level's
#   requests, which leaves out run-to-run variance): the same share. Its runs are the first two
#   runs of each default-protocol experiment, which is exactly what the single-run mode runs.
# * Known difference: B's step costs divided by 1.05 (5% faster per token, checked against the
#   simulator's truth log), default protocol: the share of levels *ahead* (target >= 90%).
#
# Nothing here is tuned to pass: the figures are printed as they come, with their spread. Runs
# Django-free; each run is a new simulator process (as each step of an experiment is a fresh
# server start). Exit status 0 when every target holds, 1 otherwise.
import argparse
import asyncio
import math
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchlib.loadgen.level import run_level
from benchlib.loadgen.metrics import summarize_level
from benchlib.loadgen.prompts import SyntheticPrompts
from benchlib.simulator.profiles import get_profile
from benchlib.stats.decision import DEFAULT_MARGIN, Arm, decide_curves
from benchlib.stats.drift import Run, level_drift
from benchlib.stats.types import Curve, LevelSample, RequestPoint
from perf.bench_loadgen import _level_cfg, read_truth, simulator

AA_TARGET = 0.05  # at most this share of A/A levels ahead or behind
KNOWN_TARGET = 0.90  # at least this share of the 5%-faster arm's levels ahead
SPEEDUP = 1.05


@dataclass(frozen=True)
class LevelRun:
    concurrency: int
    value: float  # output tok/s of the level (the figure a comparison ranks)
    requests: tuple[RequestPoint, ...]


@dataclass(frozen=True)
class RunResult:
    arm: str
    repeat: int
    position: int
    levels: dict[int, LevelRun]
    decode_tok_s: float  # the truth log's median per-request decode speed (all levels)


def _profile_args(profile: str, faster: float) -> list[str]:
    """Simulator flags for ``profile`` with its step costs divided by ``faster``."""
    if faster == 1.0:
        return ["--profile", profile]
    p = get_profile(profile)
    return ["--profile", profile, "--t0-ms", f"{p.t0_ms / faster:.6g}",
            "--k-ms", f"{p.k_ms / faster:.6g}"]  # fmt: skip


def _truth_decode(path: Path) -> float:
    rates = []
    for row in read_truth(path).values():
        chunks = row.get("chunks") or []
        if row.get("first_token") is None or len(chunks) < 2:
            continue
        span = chunks[-1][0] - row["first_token"]
        if row["completion_tokens"] > 1 and span > 0:
            rates.append((row["completion_tokens"] - 1) / span)
    return statistics.median(rates) if rates else math.nan


async def _run(
    args: argparse.Namespace, tmp: Path, *, arm: str, repeat: int, position: int, faster: float,
    seed: int,
) -> RunResult:  # fmt: skip
    levels: dict[int, LevelRun] = {}
    extra = _profile_args(args.profile, faster)[2:]
    with simulator(args.profile, tmp, None, "--http", "lean", *extra, seed=seed) as (url, truth, _):
        for c in args.levels:
            cfg = _level_cfg(
                url, c, num_requests=args.requests_per_c * c + args.requests_min,
                max_tokens=args.max_tokens, warmup_requests=c,
            )  # fmt: skip
            result = await run_level(cfg, SyntheticPrompts(args.input_tokens, seed=c))
            summary = summarize_level(result.records, concurrency=c, anchor=result.anchor)
            points = tuple(
                RequestPoint(r.start, r.end, r.output_tokens)
                for r in result.records
                if r.ok and not r.warmup and r.end > r.start
            )
            value = summary.get("output_tok_s")
            if value is None or not points:
                raise RuntimeError(f"{arm} run {repeat} C={c}: no completed requests")
            levels[c] = LevelRun(c, float(value), points)
    return RunResult(arm, repeat, position, levels, _truth_decode(truth))


async def _experiment(
    args: argparse.Namespace, tmp: Path, index: int, faster_b: float
) -> list[RunResult]:
    order = [("A", 0), ("B", 0), ("B", 1), ("A", 1)]  # the default protocol
    runs = []
    for position, (arm, repeat) in enumerate(order):
        runs.append(
            await _run(
                args, tmp, arm=arm, repeat=repeat, position=position,
                faster=faster_b if arm == "B" else 1.0, seed=1000 * index + position,
            )
        )  # fmt: skip
    return runs


def _statuses(
    runs: Sequence[RunResult], levels: Sequence[int], *, single: bool
) -> list[tuple[str, str]]:
    """The decision's status of every level (B against A), as a comparison would decide it."""
    arms = {a: [r for r in runs if r.arm == a] for a in ("A", "B")}
    if single:  # the single-run mode: A then B, one run each
        arms = {a: [min(rs, key=lambda r: r.position)] for a, rs in arms.items()}
    curves = []
    for a in ("A", "B"):
        samples = []
        for c in levels:
            own = [r.levels[c] for r in arms[a]]
            if single:
                samples.append(LevelSample(c, own[0].value, requests=own[0].requests))
            else:
                samples.append(LevelSample.from_repeats(c, [lv.value for lv in own]))
        curves.append(Curve(a, tuple(samples)))
    drift: dict[int, float] = {}
    if not single:
        for c in levels:
            size = level_drift(
                c, [Run(r.position, r.arm, r.repeat, r.levels[c].value) for r in runs],
                reference="A", candidate="B",
            ).size  # fmt: skip
            if size is not None:
                drift[c] = size
    decision = decide_curves(curves[0], curves[1], drift=drift, arms=(Arm("A", "A"), Arm("B", "B")))
    return [(level.status, level.reason) for level in decision.levels]


def _reason_kind(reason: str) -> str:
    # The decision's reasons carry figures; group them by their cause.
    for kind in ("drift", "contains 1", "no interval", "refused", "inside 1"):
        if kind in reason:
            return kind
    return reason


def _share_line(name: str, per_experiment: list[list[tuple[str, str]]], counted: set[str]) -> float:
    flat = [s for statuses in per_experiment for s, _ in statuses]
    hits = [sum(s in counted for s, _ in statuses) for statuses in per_experiment]
    share = sum(hits) / len(flat)
    low, high = _wilson(sum(hits), len(flat))
    counts = Counter(flat)
    print(
        f"{name}: {sum(hits)}/{len(flat)} levels {'/'.join(sorted(counted))} = {share:.1%} "
        f"(95% {low:.1%}-{high:.1%}); per experiment min {min(hits)} median "
        f"{statistics.median(hits):g} max {max(hits)} of {len(per_experiment[0])}; statuses "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )
    why = Counter(
        _reason_kind(r) for statuses in per_experiment for s, r in statuses if s == "inconclusive"
    )
    if why:
        print("  inconclusive because: " + ", ".join(f"{k} {v}" for k, v in sorted(why.items())))
    return share


def _wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _spread(name: str, experiments: list[list[RunResult]], levels: Sequence[int]) -> None:
    """Run-to-run spread of the figure: B/A of each experiment's means, per level."""
    parts = []
    for c in levels:
        ratios = []
        for runs in experiments:
            a = statistics.fmean(r.levels[c].value for r in runs if r.arm == "A")
            b = statistics.fmean(r.levels[c].value for r in runs if r.arm == "B")
            ratios.append(b / a)
        sd = statistics.stdev(ratios) if len(ratios) > 1 else 0.0
        parts.append(f"C={c} {statistics.fmean(ratios):.3f} sd {sd:.3f}")
    print(f"  {name} B/A of the means per level: " + "; ".join(parts))


async def _scenario(
    args: argparse.Namespace, tmp: Path, name: str, faster_b: float
) -> list[list[RunResult]]:
    experiments = []
    for i in range(args.experiments):
        started = time.monotonic()
        experiments.append(await _experiment(args, tmp, i, faster_b))
        print(f"  {name} experiment {i + 1}/{args.experiments}: {time.monotonic() - started:.1f} s",
              flush=True)  # fmt: skip
    return experiments


async def main_async(args: argparse.Namespace) -> int:
    print(
        f"profile {args.profile}, levels {args.levels}, {args.requests_min} + "
        f"{args.requests_per_c}*C requests of {args.max_tokens} tokens per level, "
        f"{args.experiments} experiments per scenario, margin {DEFAULT_MARGIN:.0%} "
        "(the decision's default), 95% confidence"
    )
    ok = True
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-aa-") as tmp_name:
        tmp = Path(tmp_name)
        aa = await _scenario(args, tmp, "A/A", 1.0)
        known = await _scenario(args, tmp, "5% faster B", SPEEDUP)
    elapsed = time.monotonic() - started
    print(f"\n== A/A, same profile as both arms ({elapsed:.0f} s for everything)")
    both = {"ahead", "behind"}
    share = _share_line(
        "default protocol (2 repeats, A B B A)",
        [_statuses(r, args.levels, single=False) for r in aa], both,
    )  # fmt: skip
    ok &= share <= AA_TARGET
    print(f"  target <= {AA_TARGET:.0%}: {'PASS' if share <= AA_TARGET else 'FAIL'}")
    share = _share_line(
        "single-run mode (A, B; within-run interval)",
        [_statuses(r, args.levels, single=True) for r in aa], both,
    )  # fmt: skip
    ok &= share <= AA_TARGET
    print(f"  target <= {AA_TARGET:.0%}: {'PASS' if share <= AA_TARGET else 'FAIL'}")
    _spread("A/A", aa, args.levels)

    print(f"\n== known difference: B's step costs / {SPEEDUP} (default protocol)")
    truth = [
        statistics.fmean(r.decode_tok_s for r in runs if r.arm == "B")
        / statistics.fmean(r.decode_tok_s for r in runs if r.arm == "A")
        for runs in known
    ]
    print(
        f"  truth log: B/A per-request decode speed {statistics.fmean(truth):.4f} "
        f"(min {min(truth):.4f}, max {max(truth):.4f} over the experiments)"
    )
    share = _share_line(
        "default protocol, ahead", [_statuses(r, args.levels, single=False) for r in known],
        {"ahead"},
    )  # fmt: skip
    ok &= share >= KNOWN_TARGET
    print(f"  target >= {KNOWN_TARGET:.0%}: {'PASS' if share >= KNOWN_TARGET else 'FAIL'}")
    _spread("5% faster B", known, args.levels)
    return 0 if ok else 1


def _levels(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--experiments", type=int, default=10)
    parser.add_argument("--levels", type=_levels, default=[1, 2, 4, 8])
    parser.add_argument("--profile", default="baseline")
    parser.add_argument("--requests-min", type=int, default=6)
    parser.add_argument("--requests-per-c", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--input-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    if args.experiments < 2 or len(args.levels) < 1:
        parser.error("at least 2 experiments and 1 level")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
