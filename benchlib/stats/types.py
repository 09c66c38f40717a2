"""Plain input and result types for A/B statistics (no Django, no load-generator imports).

Converting a load-generator level into a ``LevelSample``:

* ``RequestPoint.start`` / ``end``: the request's send and finish times in seconds on one
  monotonic clock (``time.perf_counter()`` values, or offsets from the level's start: only
  differences matter). ``output_tokens``: the server's ``usage.completion_tokens``.
  ``ttft`` and ``e2e`` are durations in seconds (first token minus start, end minus start).
* Failed requests are left out: they deliver no tokens, and keeping them would mix the
  error rate into a throughput ratio.
* ``value`` is the level's headline metric (e.g. output tok/s over the whole level).
  ``repeats`` holds the same metric from repeated sweeps of this level (``value`` is then
  normally their mean: use ``LevelSample.from_repeats``); ``requests`` holds one sweep's
  per-request data, for batch means when there are too few repeats.
"""

from __future__ import annotations

import abc
import math
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Literal, TypedDict

RatioMethod = Literal[
    "repeats-log-t", "repeats-pooled-log-t", "bootstrap-requests", "batch-means-log-t", "none"
]


@dataclass(frozen=True)
class RequestPoint:
    start: float
    end: float
    output_tokens: int
    ttft: float | None = None
    e2e: float | None = None

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"request ends ({self.end}) before it starts ({self.start})")
        if self.output_tokens < 0:
            raise ValueError("output_tokens must be >= 0")

    @property
    def duration(self) -> float:
        return self.end - self.start


class RequestColumns(Sequence[RequestPoint]):
    """A level's requests held as columns rather than one object each (``benchlib.arrays.
    columns``: numpy, which this package does not import). Iterating gives ``RequestPoint``s;
    the figures the statistics take over every request are methods, each the same arithmetic
    in the same order as the loop over points it replaces (the figures are bit for bit)."""

    @abc.abstractmethod
    def throughput(self) -> float:
        """``level_throughput`` of the requests."""

    @abc.abstractmethod
    def achieved_concurrency(self) -> float:
        """Sum of durations / span, the durations added in the requests' order."""

    @abc.abstractmethod
    def in_start_order(self) -> RequestColumns:
        """The requests sorted by (start, end), a stable sort like ``sorted``."""

    @abc.abstractmethod
    def window_throughputs(self, k: int) -> list[float]:
        """``batch_means.window_throughputs`` of the requests."""

    @abc.abstractmethod
    def total_tokens(self) -> int: ...


def level_throughput(requests: Sequence[RequestPoint]) -> float:
    """Output tokens per second over the level: sum(tokens) / (last end - first start)."""
    if not requests:
        raise ValueError("no requests")
    if isinstance(requests, RequestColumns):
        return requests.throughput()
    return sum_over_span(requests, "output_tokens")


def sum_over_span(
    requests: Sequence[RequestPoint], figure: Literal["output_tokens", "duration"]
) -> float:
    """A figure summed over the requests, per second of the level's span (last end - first
    start): the throughput from output tokens, the achieved concurrency from durations."""
    span = max(r.end for r in requests) - min(r.start for r in requests)
    if span <= 0:
        raise ValueError("the requests span no time")
    value: Callable[[RequestPoint], float] = attrgetter(figure)
    return sum(map(value, requests)) / span


@dataclass(frozen=True)
class LevelSample:
    concurrency: int
    value: float
    repeats: Sequence[float] = ()
    requests: Sequence[RequestPoint] = ()

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        # Stored as tuples so that a frozen sample cannot change under a cached result
        # (columns are kept as they are: their arrays are read-only).
        object.__setattr__(self, "repeats", tuple(float(x) for x in self.repeats))
        if not isinstance(self.requests, RequestColumns):
            object.__setattr__(self, "requests", tuple(self.requests))

    @classmethod
    def from_repeats(cls, concurrency: int, repeats: Iterable[float]) -> LevelSample:
        values = tuple(repeats)
        return cls(concurrency, statistics.fmean(values), repeats=values)

    @classmethod
    def from_requests(cls, concurrency: int, requests: Iterable[RequestPoint]) -> LevelSample:
        points = tuple(requests)
        return cls(concurrency, level_throughput(points), requests=points)


@dataclass(frozen=True)
class Curve:
    """One profile's sweep: a level metric (throughput, higher is better) against concurrency."""

    name: str
    levels: Sequence[LevelSample]
    speculative: bool = False
    unit: str = "tok/s"
    engine: str = ""  # the profile's engine key: which engine's options a recommendation names

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.levels, key=lambda level: level.concurrency))
        seen = [level.concurrency for level in ordered]
        if len(set(seen)) != len(seen):
            raise ValueError(f"{self.name}: duplicate concurrency levels {seen}")
        object.__setattr__(self, "levels", ordered)

    @classmethod
    def from_values(
        cls,
        name: str,
        values: dict[int, float],
        *,
        speculative: bool = False,
        unit: str = "tok/s",
        engine: str = "",
    ) -> Curve:
        levels = [LevelSample(c, v) for c, v in values.items()]
        return cls(name, levels, speculative=speculative, unit=unit, engine=engine)

    @property
    def concurrencies(self) -> tuple[int, ...]:
        return tuple(level.concurrency for level in self.levels)

    def level(self, concurrency: int) -> LevelSample | None:
        for level in self.levels:
            if level.concurrency == concurrency:
                return level
        return None


@dataclass(frozen=True)
class Ratio:
    """B/A with an interval; ``low``/``high`` are None when the data carry no uncertainty."""

    point: float
    low: float | None
    high: float | None
    method: RatioMethod
    confidence: float
    # Why an interval was computed but not published (it did not contain its own point, or
    # its data disagreed with the figures the point comes from); "" when none was refused.
    refused: str = ""

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    @property
    def sign(self) -> int:
        """+1: B ahead, -1: B behind, 0: not shown (no interval, a refused one, or one that
        contains 1). A point alone has no sign: without an interval it may be noise."""
        if self.low is None or self.high is None:
            return 0
        if self.low > 1.0:
            return 1
        if self.high < 1.0:
            return -1
        return 0

    @property
    def inconclusive(self) -> bool:
        return self.has_interval and self.sign == 0

    def log_bounds(self) -> tuple[float, float, float]:
        """(log low, log point, log high); the point stands in for missing bounds."""
        low = self.point if self.low is None else self.low
        high = self.point if self.high is None else self.high
        # A bootstrap replicate with no tokens on one side gives a bound of 0 (or inf).
        low = max(low, sys.float_info.min)
        return math.log(low), math.log(self.point), math.log(high)


class RatioJson(TypedDict):
    """A ``Ratio`` as JSON (``dataclasses.asdict``), as the stored figures carry it."""

    point: float
    low: float | None
    high: float | None
    method: RatioMethod
    confidence: float
    refused: str


def inside_margin(low: float, high: float, margin: float) -> bool:
    """Whether the interval [low, high] lies inside 1 ± margin, taken on the log scale
    (1/(1+m) to 1+m) so that B/A and A/B get the same answer."""
    return 1.0 / (1.0 + margin) <= low and high <= 1.0 + margin


@dataclass(frozen=True)
class LevelRatio:
    concurrency: int
    ratio: Ratio


@dataclass(frozen=True)
class RatioCurve:
    reference: str
    candidate: str
    levels: tuple[LevelRatio, ...] = field(default=())
    unmatched: tuple[int, ...] = field(default=())

    @property
    def concurrencies(self) -> tuple[int, ...]:
        return tuple(level.concurrency for level in self.levels)
