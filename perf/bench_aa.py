from __future__ import annotations

# A/A calibration of the comparison's statuses, and a known difference found.
#
#     .venv/bin/python -m perf.bench_aa [--experiments 10] [--levels 1,2,4,8]
#
# The same simulated profile as both arms, run by the experiment protocol (a fresh simulator
# process per run, closed-loop levels from the load generator library, the level's output tok/s
# per run), judged by the decision object (benchlib.stats.decision) exactly as a comparison is:
#
# * A/A, default protocol (2 repeats per arm, A B B A; interval from the repeats with the
#   run-to-run variance pooled over the levels, drift from each arm's first and last run over
#   the levels): the share of levels *ahead* or *behind* (target <= 5%).
# * A/A, single-run mode (A then B, one run each; interval from batch means over time windows
#   of each run, which leaves out run-to-run variance): the same share. Its runs are the first
#   two runs of each default-protocol experiment, which is exactly what the single-run mode runs.
# * Known difference: B's step costs divided by 1.05 (5% faster per token, checked against the
#   simulator's truth log per experiment), default protocol: the share of levels *ahead*
#   (target >= 90%).
# * Rate mode: A at twice B's step costs at a fixed 3 req/s, A B B A: decided on TPOT p50, never
#   on throughput (which is the offered rate), about the truth log's 2x (within 10%).
# * 3 A/A experiments on the real llama.cpp build (`make engines`; the tiny target model as
#   both arms, a fresh llama-server per run): at most one level flagged. 0 skips them.
#
# --dump PATH writes every run's level figures and requests as JSON, to read them again.
# Nothing here is tuned to pass: the figures are printed as they come, with their spread. Runs
# Django-free; each run is a new simulator process (as each step of an experiment is a fresh
# server start). Exit status 0 when every target holds, 1 otherwise.
import argparse
import asyncio
import json
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
from benchlib.stats.decision import DEFAULT_MARGIN, Arm, Decision
from benchlib.stats.decision_rule import decide_curves
from benchlib.stats.drift import Run, experiment_drift, level_drift
from benchlib.stats.types import Curve, LevelSample, RequestPoint
from perf.bench_loadgen import _level_cfg, read_truth, simulator
from perf.llamacpp_server import llama_server, tiny_target

AA_TARGET = 0.05  # at most this share of A/A levels ahead or behind
KNOWN_TARGET = 0.90  # at least this share of the 5%-faster arm's levels ahead
SPEEDUP = 1.05
LLAMACPP_FLAGGED = 1  # at most this many levels of the llama.cpp A/A experiments flagged
RATE = 3.0  # req/s: well below the simulator's saturation, so throughput is the offered rate
RATE_CAP = 16  # the rate level's concurrency cap (never reached at this rate)
RATE_FIGURE = "tpot_p50_ms"
# "About 2x": the decision's TPOT ratio within this of the truth log's decode-speed ratio.
RATE_AGREEMENT = 0.10


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


async def _levels_of(
    args: argparse.Namespace, url: str, label: str, **level_kw: object
) -> dict[int, LevelRun]:
    """One run's closed-loop levels against the server at ``url``."""
    levels: dict[int, LevelRun] = {}
    for c in args.levels:
        cfg = _level_cfg(
            url, c, num_requests=args.requests_per_c * c + args.requests_min,
            max_tokens=args.max_tokens, warmup_requests=c, **level_kw,
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
            raise RuntimeError(f"{label} C={c}: no completed requests")
        levels[c] = LevelRun(c, float(value), points)
    return levels


async def _run(
    args: argparse.Namespace, tmp: Path, *, arm: str, repeat: int, position: int, faster: float,
    seed: int,
) -> RunResult:  # fmt: skip
    extra = _profile_args(args.profile, faster)[2:]
    with simulator(args.profile, tmp, None, "--http", "lean", *extra, seed=seed) as (url, truth, _):
        levels = await _levels_of(args, url, f"{arm} run {repeat}")
    return RunResult(arm, repeat, position, levels, _truth_decode(truth))


async def _llamacpp_run(
    args: argparse.Namespace, tmp: Path, model: Path, *, arm: str, repeat: int, position: int
) -> RunResult:
    # Both arms are the same server on the same model: a fresh start per run, as an experiment's.
    with llama_server(model, tmp) as url:
        levels = await _levels_of(args, url, f"llama.cpp {arm} run {repeat}", model="target")
    return RunResult(arm, repeat, position, levels, math.nan)


@dataclass(frozen=True)
class RateRun:
    arm: str
    tpot_p50_ms: float
    output_tok_s: float
    decode_tok_s: float  # the truth log's median per-request decode speed


async def _rate_run(
    args: argparse.Namespace, tmp: Path, *, arm: str, slower: float, seed: int
) -> RateRun:
    extra = _profile_args(args.profile, 1.0 / slower)[2:]
    with simulator(args.profile, tmp, None, "--http", "lean", *extra, seed=seed) as (url, truth, _):
        cfg = _level_cfg(
            url, RATE_CAP, num_requests=args.rate_requests, max_tokens=args.max_tokens,
            request_rate=RATE, warmup_requests=2, seed=seed,
        )  # fmt: skip
        result = await run_level(cfg, SyntheticPrompts(args.input_tokens, seed=seed))
        summary = summarize_level(result.records, concurrency=RATE_CAP, anchor=result.anchor)
    tpot, tok_s = summary["tpot_ms"]["p50"], summary.get("output_tok_s")
    if tpot is None or tok_s is None:
        raise RuntimeError(f"rate run {arm}: no completed requests")
    return RateRun(arm, float(tpot), float(tok_s), _truth_decode(truth))


async def _experiment(
    args: argparse.Namespace, tmp: Path, index: int, faster_b: float, model: Path | None
) -> list[RunResult]:
    runs = []
    for position, (arm, repeat) in enumerate(interleaved_order(args.repeats)):
        if model is not None:
            run = await _llamacpp_run(args, tmp, model, arm=arm, repeat=repeat, position=position)
        else:
            run = await _run(
                args, tmp, arm=arm, repeat=repeat, position=position,
                faster=faster_b if arm == "B" else 1.0, seed=1000 * index + position,
            )  # fmt: skip
        runs.append(run)
    return runs


def interleaved_order(repeats: int) -> list[tuple[str, int]]:
    """(arm, repeat) per run of the interleaved protocol: A B, B A, A B, ... (2: A B B A)."""
    order: list[tuple[str, int]] = []
    for repeat in range(repeats):
        pair = ("A", "B") if repeat % 2 == 0 else ("B", "A")
        order.extend((arm, repeat) for arm in pair)
    return order


def _dump(path: Path, scenarios: dict[str, list[list[RunResult]]]) -> None:
    """Every run's level figures and requests, for reading the statistics again offline."""
    out = {
        name: [
            [
                {
                    "arm": r.arm, "repeat": r.repeat, "position": r.position,
                    "decode_tok_s": r.decode_tok_s,
                    "levels": {
                        str(c): {"value": lv.value,
                                 "requests": [[p.start, p.end, p.output_tokens]
                                              for p in lv.requests]}
                        for c, lv in r.levels.items()
                    },
                }
                for r in runs
            ]
            for runs in experiments
        ]
        for name, experiments in scenarios.items()
    }  # fmt: skip
    path.write_text(json.dumps(out))


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
        # As an experiment's stored comparison does (protocol.protocol_drift): the arms' drift
        # over the experiment's levels, compared with the margin at every level.
        size = experiment_drift(
            [
                level_drift(
                    c,
                    [Run(r.position, r.arm, r.repeat, r.levels[c].value) for r in runs],
                    reference="A",
                    candidate="B",
                )
                for c in levels
            ]
        )
        if size is not None:
            drift = dict.fromkeys(levels, size)
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
    args: argparse.Namespace, tmp: Path, name: str, faster_b: float, *, experiments: int,
    model: Path | None = None,
) -> list[list[RunResult]]:  # fmt: skip
    out = []
    for i in range(experiments):
        started = time.monotonic()
        out.append(await _experiment(args, tmp, i, faster_b, model))
        print(f"  {name} experiment {i + 1}/{experiments}: {time.monotonic() - started:.1f} s",
              flush=True)  # fmt: skip
    return out


async def _rate_pair(args: argparse.Namespace, tmp: Path) -> tuple[Decision, list[RateRun]]:
    """A at twice B's step costs (B twice as fast per token), a fixed request rate, A B B A."""
    runs = []
    for position, (arm, _) in enumerate(interleaved_order(args.repeats)):
        slower = 2.0 if arm == "A" else 1.0
        runs.append(await _rate_run(args, tmp, arm=arm, slower=slower, seed=7000 + position))
    curves = [
        Curve(a, (LevelSample.from_repeats(RATE_CAP, [r.tpot_p50_ms for r in runs if r.arm == a]),))
        for a in ("A", "B")
    ]
    decision = decide_curves(
        curves[0], curves[1], figure=RATE_FIGURE, rate_mode=True,
        arms=(Arm("A", "A"), Arm("B", "B")),
    )  # fmt: skip
    return decision, runs


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


async def main_async(args: argparse.Namespace) -> int:
    print(
        f"profile {args.profile}, levels {args.levels}, {args.requests_min} + "
        f"{args.requests_per_c}*C requests of {args.max_tokens} tokens per level, "
        f"{args.experiments} experiments per scenario, {args.repeats} repeats per arm "
        f"({' '.join(a for a, _ in interleaved_order(args.repeats))}), margin "
        f"{DEFAULT_MARGIN:.0%} (the decision's default), 95% confidence"
    )
    verdicts: list[tuple[str, bool]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-aa-") as tmp_name:
        tmp = Path(tmp_name)
        aa = await _scenario(args, tmp, "A/A", 1.0, experiments=args.experiments)
        known = await _scenario(args, tmp, "5% faster B", SPEEDUP, experiments=args.experiments)
        rate_decision, rate_runs = await _rate_pair(args, tmp)
        llama: list[list[RunResult]] = []
        if args.llamacpp_experiments:
            model = tiny_target(tmp)
            llama = await _scenario(
                args, tmp, "llama.cpp A/A", 1.0, experiments=args.llamacpp_experiments,
                model=model,
            )  # fmt: skip
    if args.dump:
        _dump(args.dump, {"aa": aa, "known": known, "llamacpp": llama})
    elapsed = time.monotonic() - started
    print(f"\n== A/A, same profile as both arms ({elapsed:.0f} s for everything)")
    both = {"ahead", "behind"}
    default_name = f"default protocol ({args.repeats} repeats, interleaved)"
    share = _share_line(default_name, [_statuses(r, args.levels, single=False) for r in aa], both)
    verdicts.append(
        (f"A/A default protocol: ahead or behind <= {AA_TARGET:.0%}", share <= AA_TARGET)
    )
    print(f"  target <= {AA_TARGET:.0%}: {_verdict(share <= AA_TARGET)}")
    share = _share_line(
        "single-run mode (A, B; within-run interval)",
        [_statuses(r, args.levels, single=True) for r in aa], both,
    )  # fmt: skip
    verdicts.append(
        (f"A/A single-run mode: ahead or behind <= {AA_TARGET:.0%}", share <= AA_TARGET)
    )
    print(f"  target <= {AA_TARGET:.0%}: {_verdict(share <= AA_TARGET)}")
    _spread("A/A", aa, args.levels)

    print(f"\n== known difference: B's step costs / {SPEEDUP} (default protocol)")
    truth = [
        statistics.fmean(r.decode_tok_s for r in runs if r.arm == "B")
        / statistics.fmean(r.decode_tok_s for r in runs if r.arm == "A")
        for runs in known
    ]
    print(
        "  truth log: B/A per-request decode speed per experiment "
        + " ".join(f"{t:.3f}" for t in truth)
        + f"; mean {statistics.fmean(truth):.4f}"
    )
    share = _share_line(
        "default protocol, ahead", [_statuses(r, args.levels, single=False) for r in known],
        {"ahead"},
    )  # fmt: skip
    verdicts.append((f"5% faster B: ahead >= {KNOWN_TARGET:.0%}", share >= KNOWN_TARGET))
    print(f"  target >= {KNOWN_TARGET:.0%}: {_verdict(share >= KNOWN_TARGET)}")
    _spread("5% faster B", known, args.levels)

    print(f"\n== rate mode: A twice B's step costs, {RATE:g} req/s, {args.rate_requests} requests")
    level = rate_decision.levels[0]
    tok_s = {a: statistics.fmean(r.output_tok_s for r in rate_runs if r.arm == a) for a in "AB"}
    truth_rate = statistics.fmean(
        r.decode_tok_s for r in rate_runs if r.arm == "B"
    ) / statistics.fmean(r.decode_tok_s for r in rate_runs if r.arm == "A")
    print(
        "  TPOT p50 ms per run: "
        + " ".join(f"{r.arm} {r.tpot_p50_ms:.2f}" for r in rate_runs)
        + f"; output tok/s B/A {tok_s['B'] / tok_s['A']:.3f} (the offered rate);"
        f" truth log decode speed B/A {truth_rate:.3f}"
    )
    print(f"  {rate_decision.summary}\n  {level.sentence}")
    on_latency = rate_decision.figure.key == RATE_FIGURE and not rate_decision.figure.throughput
    close = abs(level.ratio.point / truth_rate - 1.0) <= RATE_AGREEMENT
    ok = on_latency and level.status == "ahead" and close
    verdicts.append(
        (f"rate mode: decided on TPOT, ahead, within {RATE_AGREEMENT:.0%} of the truth log", ok)
    )
    print(f"  decided on {rate_decision.figure.label}, {level.status}, point/truth "
          f"{level.ratio.point / truth_rate:.3f}: {_verdict(ok)}")  # fmt: skip

    if llama:
        print(f"\n== A/A on the real llama.cpp build ({len(llama)} experiments, default protocol)")
        per = [_statuses(r, args.levels, single=False) for r in llama]
        _share_line(default_name, per, both)
        flagged = sum(s in both for statuses in per for s, _ in statuses)
        ok = flagged <= LLAMACPP_FLAGGED
        verdicts.append((f"llama.cpp A/A: at most {LLAMACPP_FLAGGED} level flagged", ok))
        print(f"  {flagged} levels flagged (target <= {LLAMACPP_FLAGGED}): {_verdict(ok)}")
        _spread("llama.cpp A/A", llama, args.levels)

    print("\n== criteria (the issue's thresholds)")
    for name, ok in verdicts:
        print(f"  {_verdict(ok)}  {name}")
    return 0 if all(ok for _, ok in verdicts) else 1


def _levels(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--experiments", type=int, default=10)
    parser.add_argument("--levels", type=_levels, default=[1, 2, 4, 8])
    parser.add_argument("--profile", default="baseline")
    # 8 + 3C: the single-run mode's batch means need 3 blocks of C requests at every level.
    parser.add_argument("--requests-min", type=int, default=8)
    parser.add_argument("--requests-per-c", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--input-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dump", type=Path, default=None)
    parser.add_argument("--rate-requests", type=int, default=30)
    parser.add_argument("--llamacpp-experiments", type=int, default=3)
    args = parser.parse_args(argv)
    if args.experiments < 2 or len(args.levels) < 1:
        parser.error("at least 2 experiments and 1 level")
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
