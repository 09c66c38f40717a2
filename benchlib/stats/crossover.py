"""Where a candidate's ratio to the reference crosses 1, as concurrency rises.

Interpolation: between two adjacent tested levels whose point ratios lie on either side of 1,
``log(ratio)`` is taken as linear in ``log(C)``. Sweeps space C geometrically (1, 2, 5, 10,
...) and throughput curves are close to power laws between levels, so straight lines on
log-log axes are the natural reading of the chart; and since ``log(A/B) = -log(B/A)``, the
crossing does not depend on which profile is called the reference.

Interval: the region of ``log C`` around the crossing where the (log-linearly interpolated)
pointwise interval band of the ratio contains 1. For a candidate that falls behind, the lower
bound is where the band's lower edge drops to 1, the upper bound where its upper edge drops
below 1. It is a pointwise band inverted, not a simultaneous one: read it as "where the data
cannot tell the two apart", not as an exact coverage statement. A bound is None when the band
still contains 1 at the edge of the tested range.

Several crossings are all reported, in increasing C; ``last`` is the final one, after which
the sign of the point ratio no longer changes within the tested range. A crossing is
``conclusive`` when the nearest level before it and the nearest level after it whose
intervals exclude 1 are on opposite sides, in the crossing's direction: a crossing made of
levels that straddle 1 is noise until shown otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from benchlib.stats.types import LevelRatio, RatioCurve

Direction = Literal["falls-behind", "pulls-ahead"]


@dataclass(frozen=True)
class Crossing:
    """One crossing of ratio = 1; ``low``/``high`` bound it (see the module notes)."""

    concurrency: float
    lower_level: int
    upper_level: int
    direction: Direction
    has_interval: bool
    low: float | None
    high: float | None
    conclusive: bool


@dataclass(frozen=True)
class Crossover:
    crossings: tuple[Crossing, ...]
    last: Crossing | None
    reason: str | None
    inconclusive_levels: tuple[int, ...]


def interpolate_crossing(c1: float, r1: float, c2: float, r2: float) -> float:
    """C where log(ratio), linear in log(C) between (c1, r1) and (c2, r2), is 0."""
    l1, l2 = math.log(r1), math.log(r2)
    if l1 == l2:
        raise ValueError("the ratios are equal: no single crossing")
    t = l1 / (l1 - l2)
    return math.exp(math.log(c1) + t * (math.log(c2) - math.log(c1)))


def _interp_zero(c1: float, y1: float, c2: float, y2: float) -> float:
    t = y1 / (y1 - y2)
    return math.exp(math.log(c1) + t * (math.log(c2) - math.log(c1)))


def _band(levels: Sequence[LevelRatio], flip: bool) -> tuple[list[float], list[float]]:
    """Log lower and upper bounds, flipped (1/ratio) so that the crossing always falls."""
    lows, highs = [], []
    for level in levels:
        lo, _, hi = level.ratio.log_bounds()
        if flip:
            lo, hi = -hi, -lo
        lows.append(lo)
        highs.append(hi)
    return lows, highs


def _crossing_interval(
    levels: Sequence[LevelRatio], left_start: int, right_start: int, flip: bool
) -> tuple[float | None, float | None]:
    cs = [float(level.concurrency) for level in levels]
    lows, highs = _band(levels, flip)
    j = left_start
    while j >= 0 and lows[j] <= 0.0:
        j -= 1
    low = None if j < 0 else _interp_zero(cs[j], lows[j], cs[j + 1], lows[j + 1])
    k = right_start
    while k < len(levels) and highs[k] >= 0.0:
        k += 1
    high = None if k >= len(levels) else _interp_zero(cs[k - 1], highs[k - 1], cs[k], highs[k])
    return low, high


def _nearest_sign(levels: Sequence[LevelRatio], indices: range) -> int:
    for i in indices:
        sign = levels[i].ratio.sign
        if sign != 0:
            return sign
    return 0


def _make_crossing(
    levels: Sequence[LevelRatio], lower: int, upper: int, at: float, exact: int | None
) -> Crossing:
    before = levels[lower].ratio.point
    direction: Direction = "falls-behind" if before > 1.0 else "pulls-ahead"
    flip = direction == "pulls-ahead"
    has_interval = levels[lower].ratio.has_interval and levels[upper].ratio.has_interval
    low: float | None = None
    high: float | None = None
    if has_interval:
        left, right = (exact, exact) if exact is not None else (lower, upper)
        low, high = _crossing_interval(levels, left, right, flip)
    sign_before = _nearest_sign(levels, range(lower, -1, -1))
    sign_after = _nearest_sign(levels, range(upper, len(levels)))
    expected = (1, -1) if direction == "falls-behind" else (-1, 1)
    return Crossing(
        concurrency=at,
        lower_level=levels[lower].concurrency,
        upper_level=levels[upper].concurrency,
        direction=direction,
        has_interval=has_interval,
        low=low,
        high=high,
        conclusive=(sign_before, sign_after) == expected,
    )


def _no_crossing_reason(curve: RatioCurve) -> str:
    points = [level.ratio.point for level in curve.levels]
    c_range = f"C={curve.levels[0].concurrency}..{curve.levels[-1].concurrency}"
    if all(p == 1.0 for p in points):
        return f"{curve.candidate} and {curve.reference} are level at every tested level"
    if all(p >= 1.0 for p in points):
        return f"{curve.candidate} is ahead of {curve.reference} at every tested level ({c_range})"
    return f"{curve.candidate} is behind {curve.reference} at every tested level ({c_range})"


def find_crossover(curve: RatioCurve) -> Crossover:
    """Every crossing of candidate/reference = 1 in ``curve``, with intervals (module notes)."""
    levels = curve.levels
    inconclusive = tuple(level.concurrency for level in levels if level.ratio.inconclusive)
    if len(levels) < 2:
        return Crossover((), None, "fewer than 2 levels tested by both profiles", inconclusive)
    crossings: list[Crossing] = []
    logs = [math.log(level.ratio.point) for level in levels]
    for i in range(len(levels) - 1):
        if logs[i] * logs[i + 1] < 0.0:
            at = interpolate_crossing(
                levels[i].concurrency,
                levels[i].ratio.point,
                levels[i + 1].concurrency,
                levels[i + 1].ratio.point,
            )
            crossings.append(_make_crossing(levels, i, i + 1, at, None))
        elif logs[i + 1] == 0.0 and logs[i] != 0.0:
            # A tie exactly at a level: a crossing there if the next non-tie changes side.
            nxt = next((k for k in range(i + 2, len(levels)) if logs[k] != 0.0), None)
            if nxt is not None and logs[nxt] * logs[i] < 0.0:
                at = float(levels[i + 1].concurrency)
                crossings.append(_make_crossing(levels, i, nxt, at, i + 1))
    if not crossings:
        return Crossover((), None, _no_crossing_reason(curve), inconclusive)
    return Crossover(tuple(crossings), crossings[-1], None, inconclusive)
