"""The single-run mode's interval: batch means over time blocks of one run's requests.

Requests of one level are not independent draws. Those that overlap in time share the server's
batch steps, and all of them share the machine's state while the level runs (another tenant's
burst slows a stretch of consecutive requests alike). A bootstrap that resamples requests one by
one treats them as independent and gives an interval that is too narrow: in the A/A calibration
(docs/measurement.md, "A/A calibration") it called 7.5% of the levels of two identical servers
different at 95%.

Batch means is the standard remedy for an autocorrelated series: cut the run into ``k``
contiguous pieces each long enough to hold a turnover of the batch, compute the figure on each,
and take the spread of the pieces' figures as the spread of independent measurements:
``se(figure) = sd(piece figures) / sqrt(k)`` with ``k - 1`` degrees of freedom. For throughput
the pieces are ``k`` equal time windows of the level's span (each request's tokens spread over
its duration), whose mean is exactly the level's sum of tokens / span: the ramp-up and the
drain of the last requests, which move that figure as much as the requests' speed does at
C > 1, are then in the spread (blocks of requests' own tokens / durations left them out and
called 11% of A/A levels at C=4 different). Any other statistic (the median TPOT of rate mode)
is taken on blocks of requests in start order, on the log scale. Correlation that lasts
shorter than a piece stays inside it and widens the spread, as it should; correlation that lasts
longer than a piece (a machine state that wanders over much of the run) is run-to-run variance
in all but name, and only repeats measure it. The two arms combine as in
``ratio_from_repeats``: a Welch t-interval on the log of the ratio, centred on the row's point.

A block holds at least ``BLOCK_TURNOVERS`` times the achieved concurrency in requests (Little's
law: sum of durations / span), so consecutive blocks share at most one batch turnover at their
seam; a level with fewer than ``MIN_BLOCKS`` such blocks gets no interval at all (its run says
too little about its own variability to bound anything). This is still a *within-run* interval:
it cannot see how the next server start or the machine a few minutes later would have measured,
and every surface says so (``intervals.INTERVAL_SCOPE``).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Final

from benchlib.stats.tdist import check_confidence, welch_half_width
from benchlib.stats.types import Ratio, RequestColumns, RequestPoint, sum_over_span

METHOD: Final = "batch-means-log-t"
MIN_BLOCKS = 3
MAX_BLOCKS = 10
# Requests per block, in units of the level's achieved concurrency: one turnover of the batch
# is about C requests in a closed loop, so a block holds at least one whole batch's worth and
# the requests that shared a batch step mostly fall in one block. Two turnovers left too few
# blocks on the A/A calibration's levels (8 + 3C requests) to bound anything at C >= 2.
BLOCK_TURNOVERS = 1.0

RequestStatistic = Callable[[Sequence[RequestPoint]], float]


def achieved_concurrency(requests: Sequence[RequestPoint]) -> float:
    """Little's law over the level: sum of the requests' durations / the level's span."""
    if isinstance(requests, RequestColumns):
        return requests.achieved_concurrency()
    return sum_over_span(requests, "duration")


def time_blocks(requests: Sequence[RequestPoint]) -> list[Sequence[RequestPoint]]:
    """The run's requests in start order cut into contiguous blocks of near-equal count, each
    at least ``BLOCK_TURNOVERS`` x the achieved concurrency; [] when fewer than ``MIN_BLOCKS``."""
    if not requests:
        return []
    ordered: Sequence[RequestPoint]
    if isinstance(requests, RequestColumns):
        ordered = requests.in_start_order()
    else:
        ordered = sorted(requests, key=lambda r: (r.start, r.end))
    # At C=1 one request is a whole batch turnover: a block of one is enough.
    size = max(1, math.ceil(BLOCK_TURNOVERS * achieved_concurrency(ordered)))
    k = min(MAX_BLOCKS, len(ordered) // size)
    if k < MIN_BLOCKS:
        return []
    bounds = [round(i * len(ordered) / k) for i in range(k + 1)]
    return [ordered[lo:hi] for lo, hi in itertools.pairwise(bounds)]


def window_throughputs(requests: Sequence[RequestPoint], k: int) -> list[float]:
    """The level's throughput in ``k`` equal time windows over its span, each request's tokens
    spread evenly over its own duration: their mean is exactly ``level_throughput``
    (sum of tokens / span), ramp-up and drain included."""
    if isinstance(requests, RequestColumns):
        return requests.window_throughputs(k)
    first = min(r.start for r in requests)
    span = max(r.end for r in requests) - first
    width = span / k
    tokens = [0.0] * k
    for r in requests:
        rate = r.output_tokens / r.duration
        lo, hi = r.start - first, r.end - first
        for w in range(max(0, int(lo // width)), min(k, int(hi // width) + 1)):
            overlap = min(hi, (w + 1) * width) - max(lo, w * width)
            if overlap > 0:
                tokens[w] += rate * overlap
    return [t / width for t in tokens]


def log_block_spread(
    requests: Sequence[RequestPoint], statistic: RequestStatistic | None = None
) -> tuple[float, int] | None:
    """(variance of log(figure) of the run, its degrees of freedom) by batch means; None when
    the run has too few blocks or a block's figure is not positive.

    Throughput (no ``statistic``): the batch means of the level's throughput over equal time
    windows, so that the span's edges (ramp-up, the drain of the last requests), which move
    sum(tokens) / span as much as the requests' speed does, are in the spread; the relative
    standard error of their mean is the log-scale one (delta method). Any other statistic: its
    value on each block of requests in start order, on the log scale."""
    blocks = time_blocks(requests)
    if not blocks:
        return None
    k = len(blocks)
    if statistic is None:
        values = window_throughputs(requests, k)
        mean = statistics.fmean(values)
        if mean <= 0:
            return None
        return statistics.variance(values) / (k * mean * mean), k - 1
    figures = [statistic(block) for block in blocks]
    if min(figures) <= 0 or not all(math.isfinite(v) for v in figures):
        return None
    logs = [math.log(v) for v in figures]
    return statistics.variance(logs) / k, k - 1


def ratio_from_batch_means(
    a: Sequence[RequestPoint],
    b: Sequence[RequestPoint],
    *,
    point: float,
    confidence: float,
    statistic: RequestStatistic | None = None,
) -> Ratio | None:
    """B/A = ``point`` with a Welch log-t interval from each run's batch means (module notes);
    None when either run has fewer than ``MIN_BLOCKS`` blocks."""
    check_confidence(confidence)
    if point <= 0:
        raise ValueError("point must be > 0")
    spread_a, spread_b = log_block_spread(a, statistic), log_block_spread(b, statistic)
    if spread_a is None or spread_b is None:
        return None
    (va, dfa), (vb, dfb) = spread_a, spread_b
    half = welch_half_width(va, dfa, vb, dfb, confidence)
    if half == 0.0:
        return Ratio(point, point, point, METHOD, confidence)
    return Ratio(point, point * math.exp(-half), point * math.exp(half), METHOD, confidence)
