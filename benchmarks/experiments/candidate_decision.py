"""One candidate's decision against the reference, from their level runs: each level's
health on both sides, runs per arm and latency medians handed with the ratios to
``decisions.decision_from``; at a fixed request rate, the TPOT ratios that decide there.

Apart from the comparison (comparison.py) because the throughput verdicts and the goodput
verdicts (goodput_verdicts.py) both decide through it, on the same evidence.
"""

from __future__ import annotations

from collections.abc import Mapping

from benchlib.stats.decision import Arm, ArmHealth, Decision
from benchlib.stats.intervals import ratio_curve
from benchlib.stats.types import RatioCurve
from benchmarks.experiments.decisions import (
    arm_health,
    decision_from,
    latency_curve,
    tpot_statistic,
)
from benchmarks.experiments.level_runs import (
    LevelRun,
    SeriesData,
    by_concurrency,
    mean_present,
    requests_for,
)

# The confidence of every interval and decision of a comparison.
CONFIDENCE = 0.95
# The latency medians the decision's "why" line reads.
_WHY_FIGURES = ("itl_p50_ms", "ttft_p50_ms")


def _grouped(series: SeriesData) -> dict[int, list[LevelRun]]:
    return by_concurrency(series.runs)


def candidate_decision(
    reference: SeriesData,
    candidate: SeriesData,
    ratios: RatioCurve,
    figure: str,
    rate_mode: bool,
    drift: Mapping[str, Mapping[int, float]] | None = None,
) -> Decision:
    """The decision on ``candidate`` against ``reference`` from their ratios on ``figure``,
    with each level's health, runs per arm and the latencies its "why" line reads; a level
    whose drift (candidate label -> C -> drift) exceeds the margin is inconclusive."""
    ref_runs, cand_runs = _grouped(reference), _grouped(candidate)
    health: dict[int, tuple[ArmHealth, ArmHealth]] = {}
    runs: dict[int, int] = {}
    latency: dict[int, tuple[dict[str, float | None], dict[str, float | None]]] = {}
    for lr in ratios.levels:
        a, b = ref_runs.get(lr.concurrency, []), cand_runs.get(lr.concurrency, [])
        health[lr.concurrency] = (arm_health(a), arm_health(b))
        runs[lr.concurrency] = max(min(len(a), len(b)), 1)
        # The runs' mean medians, as the level rows show them: what the "why" line reads.
        latency[lr.concurrency] = (
            {key: mean_present([r.figures.get(key) for r in a]) for key in _WHY_FIGURES},
            {key: mean_present([r.figures.get(key) for r in b]) for key in _WHY_FIGURES},
        )
    return decision_from(
        reference=_arm(reference),
        candidate=_arm(candidate),
        ratios=ratios,
        health=health,
        figure=figure,
        rate_mode=rate_mode,
        runs_per_arm=runs,
        confidence=CONFIDENCE,
        drift=(drift or {}).get(candidate.label),
        latency=latency,
    )


def _arm(series: SeriesData) -> Arm:
    return Arm(series.name, series.label, series.speculative, series.engine)


def latency_ratios(reference: SeriesData, candidate: SeriesData) -> RatioCurve:
    """B/A of TPOT p50 per level (the figure that decides at a fixed request rate)."""
    curves = []
    for series in (reference, candidate):
        grouped = _grouped(series)
        requests = {c: requests_for(runs[0]) for c, runs in grouped.items() if len(runs) == 1}
        curves.append(latency_curve(series.name, grouped, requests))
    return ratio_curve(
        curves[0],
        curves[1],
        confidence=CONFIDENCE,
        statistic=tpot_statistic,
    )
