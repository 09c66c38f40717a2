"""The A/B verdict's structured findings per candidate: ratios, crossover, saturation.

Throughput-like metrics only (higher is better). More than two profiles are compared one by
one against a chosen reference. It writes no sentence: what an operator reads (statuses,
crossovers, the recommendation) is the decision's (``decision.py``), which every surface
renders; the fields here that read the points (``behind_from``, ``ahead_from``,
``disable_speculation_above``) are the measured shape of the curves, not conclusions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from benchlib.stats.crossover import Crossover, find_crossover
from benchlib.stats.engines import EngineOption, speculation_switches
from benchlib.stats.intervals import DEFAULT_CONFIDENCE, ratio_curve
from benchlib.stats.saturation import DEFAULT_TOLERANCE, Saturation, find_saturation
from benchlib.stats.types import Curve, LevelRatio, RatioCurve


@dataclass(frozen=True)
class Verdict:
    reference: str
    candidate: str
    candidate_speculative: bool
    reference_speculative: bool
    ratios: RatioCurve
    crossover: Crossover
    first: LevelRatio | None
    top: LevelRatio | None
    behind_from: int | None  # smallest tested C from which the candidate trails at every level
    ahead_from: int | None  # smallest tested C from which the candidate leads at every level
    settled_conclusively: bool  # every level from behind_from/ahead_from on excludes 1
    reference_saturation: Saturation
    candidate_saturation: Saturation
    saturation_ratio: float  # candidate saturation throughput / reference's
    disable_speculation_above: int | None  # 0: speculation never wins in the tested range
    engine_options: tuple[EngineOption, ...]


def _settled_from(levels: Sequence[LevelRatio], behind: bool) -> int | None:
    start = None
    for level in reversed(levels):
        on_side = level.ratio.point < 1.0 if behind else level.ratio.point > 1.0
        if not on_side:
            break
        start = level.concurrency
    return start


def _disable_above(ratios: RatioCurve, crossover: Crossover, spec_is_candidate: bool) -> int | None:
    points = [level.ratio.point for level in ratios.levels]
    if not points:
        return None
    spec_points = points if spec_is_candidate else [1.0 / p for p in points]
    if spec_points[-1] >= 1.0:
        return None
    if all(p <= 1.0 for p in spec_points):
        return 0
    last = crossover.last
    # The last crossing is where speculation falls behind for good; its lower bracket is the
    # largest tested C at which speculation still measured ahead.
    return None if last is None else last.lower_level


def compare(
    reference: Curve,
    candidate: Curve,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    saturation_tolerance: float = DEFAULT_TOLERANCE,
) -> Verdict:
    """Compare ``candidate`` against ``reference``: ratios, crossover, saturation, advice."""
    ratios = ratio_curve(reference, candidate, confidence=confidence)
    crossover = find_crossover(ratios)
    levels = ratios.levels
    first = levels[0] if levels else None
    top = levels[-1] if levels else None
    behind_from = _settled_from(levels, behind=True)
    ahead_from = _settled_from(levels, behind=False)
    settled = behind_from if behind_from is not None else ahead_from
    want = -1 if behind_from is not None else 1
    settled_conclusively = settled is not None and all(
        level.ratio.sign == want for level in levels if level.concurrency >= settled
    )
    ref_sat = find_saturation(reference, tolerance=saturation_tolerance)
    cand_sat = find_saturation(candidate, tolerance=saturation_tolerance)
    disable_above: int | None = None
    options: tuple[EngineOption, ...] = ()
    if reference.speculative != candidate.speculative:
        disable_above = _disable_above(ratios, crossover, candidate.speculative)
        if disable_above:
            spec = candidate if candidate.speculative else reference
            options = speculation_switches(disable_above, spec.engine)
    return Verdict(
        reference=reference.name,
        candidate=candidate.name,
        candidate_speculative=candidate.speculative,
        reference_speculative=reference.speculative,
        ratios=ratios,
        crossover=crossover,
        first=first,
        top=top,
        behind_from=behind_from,
        ahead_from=ahead_from,
        settled_conclusively=settled_conclusively,
        reference_saturation=ref_sat,
        candidate_saturation=cand_sat,
        saturation_ratio=cand_sat.throughput / ref_sat.throughput,
        disable_speculation_above=disable_above,
        engine_options=options,
    )


def compare_all(
    reference: Curve,
    candidates: Sequence[Curve],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    saturation_tolerance: float = DEFAULT_TOLERANCE,
) -> tuple[Verdict, ...]:
    """One verdict per candidate, each against the same reference."""
    return tuple(
        compare(
            reference,
            candidate,
            confidence=confidence,
            saturation_tolerance=saturation_tolerance,
        )
        for candidate in candidates
    )
