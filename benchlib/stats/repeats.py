"""The default protocol's interval: run-to-run variance pooled over an experiment's levels.

With the default protocol every arm runs a few times (2: A B B A), each run a fresh server
start, and every run sweeps all the levels. A level's own repeats give a Welch t-interval
(``intervals.ratio_from_repeats``) whose variance has one degree of freedom per arm: with 2
repeats the Welch-Satterthwaite df lies between 1 and 2, the 97.5% t quantile between 12.7 and
4.3, and a real 5% difference is missed about half the time (docs/measurement.md, "A/A
calibration"). The interval is not wrong, it is starved: two runs say little about their own
spread.

Every level of a run shares what makes runs differ (the fresh start, the machine's state while
it runs), and on the log scale that spread is a relative one, about the same at every level of
one experiment. So the variance of log(run figure) is estimated once per experiment, pooled
over the levels and both arms (the one-way analysis-of-variance residual: the sum of squared
deviations of each run's log figure from its own arm-and-level mean, over the sum of their
``n - 1``), with ``sum(n - 1)`` degrees of freedom: 8 for A B B A over 4 levels. Each level's
B/A then gets ``log(point) +/- t(df) * sqrt(s^2 (1/n_A + 1/n_B))``.

The pooled variance can understate a level that is noisier than the rest, so each level uses
the larger of the pooled variance and its own (pooled over its two arms), with the pooled
degrees of freedom. Taking the maximum is conservative where the levels agree (A/A on
simulated 1% run-to-run noise: 3.8% of levels flagged against 5.3% for the plain pooled
variance) and keeps a level three times noisier than the rest from borrowing their calm (4.4%
flagged against 8.6%); using the level's own 2 degrees of freedom whenever its variance is the
larger would cost a third of the power on a 5% difference (73% of levels found against 97%).
With fewer than two levels there is nothing to pool, and the level's own Welch interval is
used (``intervals.ratio_from_repeats``).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from benchlib.stats.tdist import check_confidence, t_ppf
from benchlib.stats.types import Curve, Ratio

METHOD: Final = "repeats-pooled-log-t"


@dataclass(frozen=True)
class PooledVariance:
    """Variance of log(run figure) with its degrees of freedom."""

    variance: float
    df: int


def _sum_of_squares(values: Sequence[float]) -> tuple[float, int]:
    logs = [math.log(v) for v in values]
    mean = statistics.fmean(logs)
    return math.fsum((x - mean) ** 2 for x in logs), len(logs) - 1


def level_log_variance(a: Sequence[float], b: Sequence[float]) -> PooledVariance:
    """The variance of log(run figure) at one level, pooled over its two arms."""
    ss_a, df_a = _sum_of_squares(a)
    ss_b, df_b = _sum_of_squares(b)
    return PooledVariance((ss_a + ss_b) / (df_a + df_b), df_a + df_b)


def pooled_log_variance(
    levels: Mapping[int, tuple[Sequence[float], Sequence[float]]],
) -> PooledVariance | None:
    """The variance of log(run figure) pooled over ``levels`` (C -> (A's repeats, B's
    repeats), each with >= 2 positive values); None with fewer than two levels."""
    if len(levels) < 2:
        return None
    total, df = 0.0, 0
    for a, b in levels.values():
        for values in (a, b):
            if len(values) < 2 or min(values) <= 0:
                raise ValueError("each arm needs at least 2 positive repeats")
            ss, n = _sum_of_squares(values)
            total, df = total + ss, df + n
    return PooledVariance(total / df, df)


def ratio_from_pooled_repeats(
    a: Sequence[float],
    b: Sequence[float],
    pooled: PooledVariance,
    *,
    confidence: float,
) -> Ratio:
    """B/A of the repeats' means with a log-t interval from the larger of ``pooled`` and the
    level's own variance, on the pooled degrees of freedom (module notes)."""
    check_confidence(confidence)
    mean_a, mean_b = statistics.fmean(a), statistics.fmean(b)
    if mean_a <= 0 or mean_b <= 0:
        raise ValueError("repeat means must be > 0 for a ratio")
    point = mean_b / mean_a
    variance = max(level_log_variance(a, b).variance, pooled.variance)
    half = t_ppf(0.5 + confidence / 2.0, pooled.df) * math.sqrt(
        variance * (1.0 / len(a) + 1.0 / len(b))
    )
    return Ratio(point, point * math.exp(-half), point * math.exp(half), METHOD, confidence)


def curves_pooled_variance(reference: Curve, candidate: Curve) -> PooledVariance | None:
    """``pooled_log_variance`` over the levels both curves ran with >= 2 repeats."""
    levels: dict[int, tuple[Sequence[float], Sequence[float]]] = {}
    for a in reference.levels:
        b = candidate.level(a.concurrency)
        if b is None or len(a.repeats) < 2 or len(b.repeats) < 2:
            continue
        if min(a.repeats) > 0 and min(b.repeats) > 0:
            levels[a.concurrency] = (a.repeats, b.repeats)
    return pooled_log_variance(levels)
