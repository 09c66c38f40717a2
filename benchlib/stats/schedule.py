"""A load-adaptive speculation schedule derived from a matrix of variants x concurrency levels.

Input: variants of one server (speculation off, draft lengths 1, 3, 5, ...), each a ``Curve``
of a throughput-like figure (higher is better), listed **simplest first**: the order is the
preference when the data cannot tell variants apart (normally off, then shorter drafts).

Per level C tested by every variant, the choice is **the simplest variant that no other
variant beats conclusively**: "V beats U" means the interval of V/U at the chosen confidence
lies wholly above 1 and not inside 1 +/- ``margin`` (``decision``'s "ahead"; margin 0 by
default here, ``decision.DEFAULT_MARGIN`` on the dashboard); the interval is
``intervals.level_ratio``'s: Welch log-t on repeats, else batch means over each run's
requests. A ratio without an interval (single figures, too few time blocks, or an interval
refused because it contradicts its point) is never conclusive, so without repeats or
per-request data the schedule keeps the simplest variant everywhere. Since an interval always
contains its point, "beats" follows the point order and the variant with the best point is
never beaten: a choice always exists.

Bands: consecutive levels with the same choice form a band, so a middle range where some
variant wins conclusively gets its own band, and inconclusive levels between two winners get
whatever is simplest among the variants not beaten there (normally the simplest overall).
Batch sizes between two tested levels that end and start different bands were not measured:
they go to the simpler of the two bands' variants (the same rule: switch only where shown).
The first band starts at 1 and the last has no upper end (nothing else was measured there).

Gain per band, per level: the chosen variant over the reference (the simplest variant) and
over the runner-up (the best other variant by its point figure), each a ratio with its
interval; a band's ``expected_gain`` is the geometric mean of its levels' runner-up ratios,
``gain_interval`` the envelope of their intervals. Intervals are pointwise, one per level and
pair: with many variants and levels a few spurious "conclusive" levels are to be expected at
95%, which is why a derived schedule still needs its verification run.

The engines switch on the batch they run, not on the client's concurrency; in a closed-loop
sweep at steady state the two are close (see ``engines``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from benchlib.stats.batch_thresholds import DEFAULT_MIN_SHARE, plan_batches
from benchlib.stats.intervals import DEFAULT_CONFIDENCE, ratio_curve
from benchlib.stats.types import Curve, Ratio, inside_margin


@dataclass(frozen=True)
class Variant:
    curve: Curve
    draft_length: int  # draft tokens per verify step; 0 = speculation off

    def __post_init__(self) -> None:
        if self.draft_length < 0:
            raise ValueError(f"{self.curve.name}: draft_length must be >= 0")

    @property
    def name(self) -> str:
        return self.curve.name


@dataclass(frozen=True)
class LevelGain:
    concurrency: int
    versus: str  # the variant the chosen one is compared with
    ratio: Ratio  # chosen / versus


@dataclass(frozen=True)
class LevelChoice:
    concurrency: int
    variant: str
    draft_length: int
    reason: str


@dataclass(frozen=True)
class Step:
    """Batch sizes ``start``..``end`` (inclusive; ``end`` None: no upper limit) draft
    ``draft_length`` tokens per step (0 = off). The form every engine configuration is
    written from."""

    start: int
    end: int | None
    draft_length: int


@dataclass(frozen=True)
class Band:
    variant: str
    draft_length: int
    start: int
    end: int | None
    levels: tuple[int, ...]  # the tested levels inside the band
    over_reference: tuple[LevelGain, ...]
    over_runner_up: tuple[LevelGain, ...]

    @property
    def expected_gain(self) -> float:
        """Geometric mean over the band's levels of chosen / runner-up (point figures)."""
        logs = [math.log(g.ratio.point) for g in self.over_runner_up]
        return math.exp(sum(logs) / len(logs))

    @property
    def gain_interval(self) -> tuple[float, float] | None:
        """(lowest lower bound, highest upper bound) of the band's runner-up ratios; None
        when a level has no interval."""
        ratios = [g.ratio for g in self.over_runner_up]
        if not all(r.has_interval for r in ratios):
            return None
        return min(r.low for r in ratios if r.low is not None), max(
            r.high for r in ratios if r.high is not None
        )


@dataclass(frozen=True)
class Schedule:
    reference: str  # the simplest variant
    confidence: float
    bands: tuple[Band, ...]
    choices: tuple[LevelChoice, ...]
    untested: tuple[int, ...]  # levels some variant did not test: left out

    def draft_length_at(self, batch: int) -> int:
        for band in self.bands:
            if band.start <= batch and (band.end is None or batch <= band.end):
                return band.draft_length
        raise ValueError(f"batch size {batch} is below 1")

    def steps(self) -> tuple[Step, ...]:
        """The bands as batch-size steps, adjacent bands with the same draft length merged."""
        out: list[Step] = []
        for band in self.bands:
            if out and out[-1].draft_length == band.draft_length:
                out[-1] = Step(out[-1].start, band.end, band.draft_length)
            else:
                out.append(Step(band.start, band.end, band.draft_length))
        return tuple(out)

    def describe(self) -> str:
        parts = []
        for band in self.bands:
            span = f"C {band.start}+" if band.end is None else f"C {band.start}-{band.end}"
            gain = f"{band.expected_gain:.3f}x the runner-up"
            interval = band.gain_interval
            if interval is not None:
                gain += f" ({self.confidence:.0%} {interval[0]:.3f}-{interval[1]:.3f}x)"
            parts.append(f"{span}: {band.variant} (K={band.draft_length}), {gain}")
        return "; ".join(parts)


def inverse(ratio: Ratio) -> Ratio:
    """A/B from B/A: the reciprocal point, bounds swapped and inverted."""

    def inv(x: float | None) -> float | None:
        if x is None:
            return None
        return math.inf if x <= 0 else 1.0 / x

    point = inv(ratio.point)
    assert point is not None
    return Ratio(
        point, inv(ratio.high), inv(ratio.low), ratio.method, ratio.confidence, ratio.refused
    )


def _beats(ratio: Ratio, margin: float = 0.0) -> bool:
    """The interval lies wholly above 1 and not inside 1 +/- ``margin``: ``decision``'s
    "ahead", so a schedule and the A/B decisions of its variants cannot disagree."""
    if ratio.low is None or ratio.high is None or ratio.low <= 1.0:
        return False
    return not inside_margin(ratio.low, ratio.high, margin)


def _fmt(ratio: Ratio) -> str:
    if ratio.low is None or ratio.high is None:
        return f"{ratio.point:.3f}x, no interval"
    return f"{ratio.point:.3f}x, {ratio.confidence:.0%} {ratio.low:.3f}-{ratio.high:.3f}x"


class _Pairs:
    """Every pair's ratio per level, computed once per unordered pair."""

    def __init__(self, variants: Sequence[Variant], confidence: float) -> None:
        self.confidence = confidence
        self.ratios: dict[tuple[int, int], dict[int, Ratio]] = {}
        for i, a in enumerate(variants):
            for j in range(i + 1, len(variants)):
                curve = ratio_curve(a.curve, variants[j].curve, confidence=confidence)
                self.ratios[(i, j)] = {lv.concurrency: lv.ratio for lv in curve.levels}

    def of(self, num: int, den: int, concurrency: int) -> Ratio:
        """variant ``num`` / variant ``den`` at one level."""
        if num > den:
            return self.ratios[(den, num)][concurrency]
        return inverse(self.ratios[(num, den)][concurrency])


def _choose(variants: Sequence[Variant], pairs: _Pairs, c: int, margin: float) -> tuple[int, str]:
    reference = variants[0].name
    for i, variant in enumerate(variants):
        beaten_by = [
            j for j in range(len(variants)) if j != i and _beats(pairs.of(j, i, c), margin)
        ]
        if beaten_by:
            continue
        if i == 0:
            return 0, f"no variant is conclusively ahead of {reference}"
        simpler = "; ".join(
            f"{variant.name}/{variants[k].name} = {_fmt(pairs.of(i, k, c))}"
            for k in range(i)
            if _beats(pairs.of(i, k, c), margin)
        )
        return i, f"the simplest variant no other beats conclusively ({simpler})"
    raise AssertionError("the variant with the best point figure is never beaten")


def _gain(variants: Sequence[Variant], pairs: _Pairs, chosen: int, other: int, c: int) -> LevelGain:
    if chosen == other:
        # The reference over itself: exactly 1, and no interval to speak of.
        return LevelGain(c, variants[other].name, Ratio(1.0, None, None, "none", pairs.confidence))
    return LevelGain(c, variants[other].name, pairs.of(chosen, other, c))


def derive_schedule(
    variants: Sequence[Variant],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    margin: float = 0.0,
    observed: Mapping[int, Mapping[int, int]] | None = None,
    min_share: float = DEFAULT_MIN_SHARE,
) -> Schedule:
    """The schedule over the levels every variant tested (see the module notes);
    ``variants`` simplest first. With a ``margin``, a variant beats another only outside
    1 +/- margin (``decision.DEFAULT_MARGIN`` is what the dashboard uses). ``observed``: the
    running batch sizes the server reported per level (C -> batch size -> readings), from
    which the band edges are placed (``batch_thresholds``); without it, on C."""
    if len(variants) < 2:
        raise ValueError("a schedule needs at least 2 variants")
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ValueError(f"variant names must be unique: {names}")
    tested = [set(v.curve.concurrencies) for v in variants]
    common = sorted(set.intersection(*tested))
    untested = tuple(sorted(set.union(*tested) - set(common)))
    if not common:
        raise ValueError("no concurrency level was tested by every variant")
    pairs = _Pairs(variants, confidence)
    choices: list[LevelChoice] = []
    groups: list[tuple[int, list[int]]] = []  # (variant index, levels)
    own = {c: _choose(variants, pairs, c, margin)[0] for c in common}
    # What the schedule may run at a level (``batch_thresholds``): its own choice, or a
    # variant nothing beats there whose point is within the margin of the own choice's.
    admissible = {
        c: [
            i
            for i in range(len(variants))
            if i == own[c]
            or (
                not any(_beats(pairs.of(j, i, c), margin) for j in range(len(variants)) if j != i)
                and pairs.of(i, own[c], c).point >= 1.0 - margin
            )
        ]
        for c in common
    }
    plan = plan_batches(common, admissible, observed, min_share=min_share)
    for c in common:
        i, reason = _choose(variants, pairs, c, margin)
        if c in plan.held:
            i, ran = plan.choices[c], plan.range_of(c)
            overlapping = ", ".join(f"C={o}" for o in plan.held[c])
            reason = (
                f"the server ran batch sizes {ran.low}-{ran.high} here, overlapping {overlapping}: "
                f"one variant for them, {variants[i].name}, the simplest beaten at none"
            )
        choices.append(LevelChoice(c, variants[i].name, variants[i].draft_length, reason))
        if groups and groups[-1][0] == i:
            groups[-1][1].append(c)
        else:
            groups.append((i, [c]))
    bands: list[Band] = []
    start = 1
    # One switch per change of variant, placed on the running batch sizes (or on C).
    switches = iter(plan.switches)
    for g, (i, levels) in enumerate(groups):
        end: int | None = None
        if g + 1 < len(groups):
            end = next(switches).at - 1
        runner_ups = []
        for c in levels:
            others = [k for k in range(len(variants)) if k != i]
            best = max(others, key=lambda k: _value(variants[k], c))
            runner_ups.append(_gain(variants, pairs, i, best, c))
        bands.append(
            Band(
                variant=variants[i].name,
                draft_length=variants[i].draft_length,
                start=start,
                end=end,
                levels=tuple(levels),
                over_reference=tuple(_gain(variants, pairs, i, 0, c) for c in levels),
                over_runner_up=tuple(runner_ups),
            )
        )
        if end is not None:
            start = end + 1
    return Schedule(names[0], confidence, tuple(bands), tuple(choices), untested)


def _value(variant: Variant, c: int) -> float:
    level = variant.curve.level(c)
    assert level is not None
    return level.value
