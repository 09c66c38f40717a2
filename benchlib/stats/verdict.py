"""The A/B verdict: structured findings and one plain-English paragraph per candidate.

Throughput-like metrics only (higher is better): "faster" means a ratio above 1.
More than two profiles are compared one by one against a chosen reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from benchlib.stats.crossover import Crossover, find_crossover
from benchlib.stats.engines import EngineOption, describe, option_names, speculation_switches
from benchlib.stats.intervals import DEFAULT_CONFIDENCE, DEFAULT_N_BOOT, ratio_curve
from benchlib.stats.saturation import DEFAULT_TOLERANCE, Saturation, find_saturation
from benchlib.stats.types import Curve, LevelRatio, Ratio, RatioCurve


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
    text: str


def _settled_from(levels: Sequence[LevelRatio], behind: bool) -> int | None:
    start = None
    for level in reversed(levels):
        on_side = level.ratio.point < 1.0 if behind else level.ratio.point > 1.0
        if not on_side:
            break
        start = level.concurrency
    return start


def _pct(ratio: Ratio) -> str:
    change = ratio.point - 1.0
    if change == 0:
        return "level"
    word = "faster" if change > 0 else "slower"
    return f"{abs(change):.1%} {word}"


def _noise(ratio: Ratio) -> str:
    if not ratio.inconclusive or ratio.low is None or ratio.high is None:
        return ""
    return f" (within noise: {ratio.confidence:.0%} interval {ratio.low:.3f}-{ratio.high:.3f}x)"


def _fmt_c(value: float | None, edge: str) -> str:
    return edge if value is None else f"{value:.3g}"


def _crossover_sentence(verdict_crossover: Crossover, ratios: RatioCurve) -> str:
    last = verdict_crossover.last
    if last is None:
        return f"No crossover: {verdict_crossover.reason}."
    count = len(verdict_crossover.crossings)
    lead = f"The ratio crosses 1 {count} times; the last crossover" if count > 1 else "Crossover"
    sentence = (
        f"{lead} at C≈{last.concurrency:.3g} (interpolated on log C between "
        f"C={last.lower_level} and C={last.upper_level}"
    )
    if last.has_interval:
        confidence = ratios.levels[0].ratio.confidence
        low = _fmt_c(last.low, f"below C={ratios.levels[0].concurrency}")
        high = _fmt_c(last.high, f"beyond C={ratios.levels[-1].concurrency}")
        sentence += f"; {confidence:.0%} interval {low} to {high}"
    else:
        sentence += "; no interval without repeats or per-request data"
    sentence += ")"
    if not last.conclusive:
        sentence += ", but the levels around it are within noise"
    return sentence + "."


def _saturation_phrase(s: Saturation, unit: str) -> str:
    if s.saturated:
        return f"{s.name} saturates at ~{s.throughput:.4g} {unit} from C={s.concurrency}"
    return f"{s.name} is not saturated within the tested range (peak {s.throughput:.4g} {unit})"


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
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    saturation_tolerance: float = DEFAULT_TOLERANCE,
) -> Verdict:
    """Compare ``candidate`` against ``reference``: ratios, crossover, saturation, advice."""
    ratios = ratio_curve(reference, candidate, confidence=confidence, n_boot=n_boot, seed=seed)
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
    verdict = Verdict(
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
        text="",
    )
    return _with_text(verdict, reference, candidate)


def compare_all(
    reference: Curve,
    candidates: Sequence[Curve],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    saturation_tolerance: float = DEFAULT_TOLERANCE,
) -> tuple[Verdict, ...]:
    """One verdict per candidate, each against the same reference."""
    return tuple(
        compare(
            reference,
            candidate,
            confidence=confidence,
            n_boot=n_boot,
            seed=seed,
            saturation_tolerance=saturation_tolerance,
        )
        for candidate in candidates
    )


def _with_text(v: Verdict, reference: Curve, candidate: Curve) -> Verdict:
    if v.first is None or v.top is None:
        text = f"{v.candidate} and {v.reference} share no tested concurrency level."
        return replace(v, text=text)
    first, top = v.first, v.top
    sentences = []
    head = f"{v.candidate} is {_pct(first.ratio)} at C={first.concurrency}{_noise(first.ratio)}"
    settled = v.behind_from if v.behind_from is not None else v.ahead_from
    word = "slower" if v.behind_from is not None else "faster"
    if settled is not None and settled != first.concurrency:
        head += f" and {word} from C={settled} on"
    elif settled is not None and len(v.ratios.levels) > 1:
        head += f" and {word} at every tested level up to C={top.concurrency}"
    if top.concurrency != first.concurrency and top.ratio.point != 1.0:
        if top.ratio.point < 1.0:
            leader, factor = v.reference, 1.0 / top.ratio.point
        else:
            leader, factor = v.candidate, top.ratio.point
        head += (
            f"; at C={top.concurrency} {leader} delivers {factor:.2f}x the throughput"
            f"{_noise(top.ratio)}"
        )
    sentences.append(head + ".")
    sentences.append(_crossover_sentence(v.crossover, v.ratios))
    unit = reference.unit
    sentences.append(
        f"{_saturation_phrase(v.reference_saturation, unit)}; "
        f"{_saturation_phrase(v.candidate_saturation, unit)} "
        f"({v.saturation_ratio:.2f}x {v.reference}'s)."
    )
    spec_name = candidate.name if candidate.speculative else reference.name
    # Without a threshold the advice still names the engine's own options (when it is known).
    names = option_names(candidate.engine if candidate.speculative else reference.engine)
    see = f" ({names})" if names else ""
    if v.disable_speculation_above == 0:
        sentences.append(
            f"Speculation ({spec_name}) does not win at any tested level: serve without it{see}."
        )
    elif v.disable_speculation_above is not None:
        sentences.append(
            f"Recommendation: disable speculation above C={v.disable_speculation_above} "
            f"({describe(v.engine_options)})."
        )
    elif reference.speculative != candidate.speculative:
        sentences.append(
            f"Speculation ({spec_name}) is still ahead at the top tested level: keep it on{see}."
        )
    return replace(v, text=" ".join(sentences))
