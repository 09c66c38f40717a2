"""Where a throughput curve stops growing.

Rule: remove spikes (an interior level further than ``tolerance`` from the median of itself
and its two neighbours is replaced by that median), take the peak of what is left, and call
the curve saturated at the smallest tested C whose throughput is within ``tolerance``
(default 5%) of that peak. The curve counts as saturated within the tested range only if
that C is below the top level AND the last step gains at most ``max_gain_per_doubling``
(default 5%) per doubling of C; otherwise it is "not saturated within the tested range".

Why this rule rather than "marginal gain per doubling below a threshold" alone: gains between
unevenly spaced levels are noisy, and one flat step on a curve that later climbs again would
stop the search early; the distance to the peak looks at the whole curve. The spike filter
removes a single noisy spike or dip in the middle (which would otherwise move the peak or the
first level near it) and leaves a real, gentle maximum as measured; a decreasing tail
(over-saturation: queueing, preemption) leaves the peak, and so the saturation point, where
it was. The end points are not filtered (they have one neighbour): a spike at the top level
shows as the peak. With repeats, the level means are used.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from benchlib.stats.types import Curve, LevelSample

DEFAULT_TOLERANCE = 0.05
DEFAULT_MAX_GAIN_PER_DOUBLING = 0.05


@dataclass(frozen=True)
class Saturation:
    name: str
    saturated: bool
    concurrency: int | None  # smallest C within tolerance of the peak (None if not saturated)
    throughput: float  # the peak after spike removal: the curve's saturation throughput
    peak_concurrency: int
    last_gain_per_doubling: float | None
    tolerance: float
    reason: str


def level_mean(level: LevelSample) -> float:
    return statistics.fmean(level.repeats) if level.repeats else level.value


def despike(values: Sequence[float], tolerance: float) -> list[float]:
    """Replace interior values further than ``tolerance`` (relative) from their median of 3."""
    out = list(values)
    for i in range(1, len(values) - 1):
        median = statistics.median(values[i - 1 : i + 2])
        if abs(values[i] - median) > tolerance * median:
            out[i] = median
    return out


def gain_per_doubling(c1: float, v1: float, c2: float, v2: float) -> float:
    """Relative throughput gain per doubling of C between two levels (0.05 = +5%/doubling)."""
    doublings = math.log2(c2 / c1)
    return float((v2 / v1) ** (1.0 / doublings)) - 1.0


def find_saturation(
    curve: Curve,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    max_gain_per_doubling: float = DEFAULT_MAX_GAIN_PER_DOUBLING,
    despiking: bool = True,
) -> Saturation:
    """The saturation throughput of ``curve`` and the smallest C reaching it (module notes)."""
    if not 0.0 <= tolerance < 1.0:
        raise ValueError("tolerance must be in [0, 1)")
    levels = curve.levels
    if not levels:
        raise ValueError(f"{curve.name}: no levels")
    cs = [level.concurrency for level in levels]
    raw = [level_mean(level) for level in levels]
    values = despike(raw, tolerance) if despiking else raw
    peak = max(values)
    peak_at = cs[values.index(peak)]
    if len(levels) < 2:
        return Saturation(
            curve.name, False, None, peak, peak_at, None, tolerance, "only one level tested"
        )
    threshold = (1.0 - tolerance) * peak
    first = next(i for i, v in enumerate(values) if v >= threshold)
    last_gain = gain_per_doubling(cs[-2], values[-2], cs[-1], values[-1])
    top = cs[-1]
    if first == len(levels) - 1:
        reason = (
            f"not saturated within the tested range: still gaining at C={top} "
            f"({last_gain:+.1%} per doubling of C)"
        )
        return Saturation(curve.name, False, None, peak, peak_at, last_gain, tolerance, reason)
    if last_gain > max_gain_per_doubling:
        reason = (
            f"not saturated within the tested range: the last step gains {last_gain:+.1%} "
            f"per doubling of C (limit {max_gain_per_doubling:.0%})"
        )
        return Saturation(curve.name, False, None, peak, peak_at, last_gain, tolerance, reason)
    reason = (
        f"saturates at about {peak:.4g} {curve.unit}, within {tolerance:.0%} of it "
        f"from C={cs[first]}"
    )
    return Saturation(curve.name, True, cs[first], peak, peak_at, last_gain, tolerance, reason)
