"""Ratio B/A per concurrency level, with an uncertainty interval.

Two methods, chosen per level by what the data hold:

``repeats-log-t`` (both sides have >= 2 repeats). A Welch t-interval on the log of the ratio
of means, with the delta-method standard error
``se^2 = s_A^2 / (n_A m_A^2) + s_B^2 / (n_B m_B^2)`` and Welch-Satterthwaite degrees of
freedom, exponentiated back. Why this one: sweeps are expensive, so repeats are few (2-5).
A percentile bootstrap over so few repeats has a handful of distinct resamples and covers far
below its nominal rate; the t quantile accounts for the small n. The log scale makes the
interval multiplicative and symmetric under swapping A and B (the interval of A/B is the
reciprocal of that of B/A), so "B is 10% slower" and "A is 11% faster" agree. Fieller's
interval is the exact alternative for a ratio of normal means, but for throughputs, whose
means are many standard errors from zero, it gives practically the same bounds, and it needs
a common variance and can become unbounded; the log-t form needs neither.

``batch-means-log-t`` (otherwise, when both sides carry per-request data: one run per arm).
Batch means over time windows of each run (``benchlib.stats.batch_means``, whose notes say why
not a bootstrap over single requests). ``bootstrap-requests``, the percentile bootstrap over a
level's single requests that this mode used before, is computed no more; the label stays for
comparisons stored with it.

``none``: neither is possible (single values); the point is ``value_B / value_A`` and the
bounds are None, so callers can tell "no uncertainty known" from "conclusive".

One truth for the point (``level_ratio``): whatever the method, the point is always
``value_B / value_A``, the ratio of the two figures a table row shows; repeats or requests
only give the interval. An interval that does not contain that point, or one whose
requests give a throughput ratio more than ``AGREEMENT`` away from it (the requests are not
the ones the figures were computed from), is a bug in the data or the code: it is refused
(bounds None, ``refused`` says why) rather than published beside a point it contradicts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

from benchlib.stats.batch_means import BLOCK_TURNOVERS, MIN_BLOCKS, ratio_from_batch_means
from benchlib.stats.repeats import (
    PooledVariance,
    curves_pooled_variance,
    ratio_from_pooled_repeats,
)
from benchlib.stats.tdist import check_confidence, welch_half_width
from benchlib.stats.types import (
    Curve,
    LevelRatio,
    LevelSample,
    Ratio,
    RatioCurve,
    RequestPoint,
    level_throughput,
)

RequestStatistic = Callable[[Sequence[RequestPoint]], float]

DEFAULT_CONFIDENCE = 0.95
# How far (relative) an interval's own point may sit from the row's ratio: the level figure
# and the throughput of the same requests agree to rounding, so 1% already means
# the requests belong to some other level or run.
AGREEMENT = 0.01


# What each method's interval includes, in the words a surface shows beside it. The request
# bootstrap of a single run cannot see how the next server start would have measured.
INTERVAL_SCOPE = {
    "repeats-log-t": "between-run interval: includes run-to-run variance",
    "repeats-pooled-log-t": "between-run interval: includes run-to-run variance",
    "bootstrap-requests": "within-run interval: leaves out run-to-run variance",
    "batch-means-log-t": "within-run interval: leaves out run-to-run variance",
    "none": "no interval",
}
# The methods whose interval comes from one run per arm: every statement built on them says so.
WITHIN_RUN_METHODS = frozenset({"bootstrap-requests", "batch-means-log-t"})
TOO_FEW_BLOCKS = (
    f"one run per arm with fewer than {MIN_BLOCKS} time blocks of {BLOCK_TURNOVERS:g}x the "
    "achieved concurrency in requests: too few to bound the run's own variability"
)


def is_within_run(method: str) -> bool:
    """Whether an interval by ``method`` leaves out run-to-run variance (one run per arm)."""
    return method in WITHIN_RUN_METHODS


def interval_scope(method: str) -> str:
    """The label of an interval ``method`` (``INTERVAL_SCOPE``); unknown methods say so."""
    return INTERVAL_SCOPE.get(method, f"interval by {method}: its scope is not known")


def quantile(sorted_values: Sequence[float], p: float) -> float:
    """Linear-interpolation quantile (numpy's default) of already sorted values."""
    # The load generator's summaries use this one too (`metrics.quantile` is this function).
    # It lives here, not there: the simulator (and its nvidia-smi stand-in, run by a host's
    # plain python3) imports these statistics, and the load generator's package pulls in httpx.
    if not sorted_values:
        raise ValueError("no values")
    pos = p * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def ratio_from_repeats(
    a: Sequence[float], b: Sequence[float], *, confidence: float = DEFAULT_CONFIDENCE
) -> Ratio:
    """Ratio of means B/A with a Welch log-ratio t-interval (see the module notes)."""
    check_confidence(confidence)
    if len(a) < 2 or len(b) < 2:
        raise ValueError("each side needs at least 2 repeats")
    mean_a, mean_b = statistics.fmean(a), statistics.fmean(b)
    if mean_a <= 0 or mean_b <= 0:
        raise ValueError("repeat means must be > 0 for a ratio")
    # Per-side variance of log(mean) by the delta method.
    va = statistics.variance(a) / (len(a) * mean_a**2)
    vb = statistics.variance(b) / (len(b) * mean_b**2)
    point = mean_b / mean_a
    half = welch_half_width(va, len(a) - 1, vb, len(b) - 1, confidence)
    if half == 0.0:
        return Ratio(point, point, point, "repeats-log-t", confidence)
    log_point = math.log(point)
    return Ratio(
        point, math.exp(log_point - half), math.exp(log_point + half), "repeats-log-t", confidence
    )


def level_ratio(
    a: LevelSample,
    b: LevelSample,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    statistic: RequestStatistic | None = None,
    pooled: PooledVariance | None = None,
) -> Ratio:
    """B/A at one level: the point is always ``b.value / a.value`` (see the module notes);
    the interval from repeats when both have >= 2 (with ``pooled``, the experiment's pooled
    run-to-run variance: ``repeats``), else batch means over each run's requests
    (``batch_means``), else none."""
    if a.value <= 0 or b.value <= 0:
        raise ValueError(f"C={a.concurrency}: values must be > 0 for a ratio")
    point = b.value / a.value
    if len(a.repeats) >= 2 and len(b.repeats) >= 2:
        if pooled is not None:
            interval = ratio_from_pooled_repeats(
                a.repeats, b.repeats, pooled, confidence=confidence
            )
        else:
            interval = ratio_from_repeats(a.repeats, b.repeats, confidence=confidence)
    elif a.requests and b.requests:
        # One run per arm: batch means over time blocks of the run's requests (their own
        # module's notes say why not a bootstrap over single requests).
        request_point = (statistic or level_throughput)(b.requests) / (
            statistic or level_throughput
        )(a.requests)
        found = ratio_from_batch_means(
            a.requests,
            b.requests,
            point=request_point,
            confidence=confidence,
            statistic=statistic,
        )
        if found is None:
            return Ratio(point, None, None, "none", confidence, refused=TOO_FEW_BLOCKS)
        interval = found
    else:
        return Ratio(point, None, None, "none", confidence)
    return publishable(point, interval)


def publishable(point: float, interval: Ratio) -> Ratio:
    """``interval``'s bounds around ``point``, or no bounds and the reason they were refused."""
    assert interval.low is not None and interval.high is not None
    refused = ""
    if abs(interval.point / point - 1.0) > AGREEMENT:
        refused = (
            f"the {interval.method} data give B/A = {interval.point:.4g}, not the row's "
            f"{point:.4g}: they are not the data the figures were computed from"
        )
    elif not interval.low <= point <= interval.high:
        refused = (
            f"the {interval.method} interval {interval.low:.4g}-{interval.high:.4g} does not "
            f"contain the point {point:.4g}"
        )
    if refused:
        return Ratio(point, None, None, "none", interval.confidence, refused=refused)
    return Ratio(point, interval.low, interval.high, interval.method, interval.confidence)


def ratio_curve(
    reference: Curve,
    candidate: Curve,
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    statistic: RequestStatistic | None = None,
) -> RatioCurve:
    """candidate/reference at every concurrency both curves tested, in increasing C."""
    levels: list[LevelRatio] = []
    unmatched: list[int] = []
    pooled = curves_pooled_variance(reference, candidate)
    for a in reference.levels:
        b = candidate.level(a.concurrency)
        if b is None:
            unmatched.append(a.concurrency)
            continue
        ratio = level_ratio(
            a,
            b,
            confidence=confidence,
            statistic=statistic,
            pooled=pooled,
        )
        levels.append(LevelRatio(a.concurrency, ratio))
    unmatched.extend(c for c in candidate.concurrencies if reference.level(c) is None)
    return RatioCurve(reference.name, candidate.name, tuple(levels), tuple(sorted(unmatched)))
