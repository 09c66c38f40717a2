"""Server-side figures for exactly one interval (a sweep level), from `/metrics` snapshots.

Counters are differenced per series (one per replica) before summing, with Prometheus
`increase()` semantics:

- a series whose value went down was reset (server restart): its post-reset value is the
  increase from 0, and the interval is flagged `reset=True`; a changed
  `process_start_time_seconds` marks every series as reset;
- a series that appears in the later snapshot started inside the interval: its whole value
  counts (flagged in `appeared`);
- a series that disappears contributes nothing (flagged in `disappeared`): what it counted
  after the earlier scrape is unknown.

An increase larger than the old value after a restart is indistinguishable from no restart
unless the start time is exported: scrape often enough, or pass the whole series of snapshots
to `interval_over`, which chains the steps.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from hosts.telemetry.engine_profiles import CounterKey, Engine, LatencyKey
from hosts.telemetry.prometheus import (
    EngineMetrics,
    Histogram,
    LabelKey,
    accept_length,
    acceptance_rate,
    merge_histograms,
)

# Where a speculative figure came from (docs/measurement.md, "Speculative figures"):
# - "counters": 1 + accepted / drafts (vLLM's drafted and accepted counters), over exactly
#   this interval;
# - "verify_counters": (generation tokens - requests) / verify calls (SGLang's only
#   speculative counter; every decode step is a verify step), over exactly this interval;
# - "itl_counters": (generation tokens - requests) / ITL histogram count (vLLM: one ITL sample
#   per engine step), over exactly this interval;
# - "gauge": the mean of the engine's own gauge at the snapshots (its window, e.g. SGLang's
#   last 40 decode passes: not the interval).
Source = Literal["counters", "verify_counters", "itl_counters", "gauge"] | None


@dataclass(frozen=True)
class SeriesRef:
    metric: str
    labels: LabelKey

    def __str__(self) -> str:
        inner = ",".join(f'{name}="{value}"' for name, value in self.labels)
        return f"{self.metric}{{{inner}}}"


@dataclass(frozen=True)
class HistogramSummary:
    count: float
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


@dataclass(frozen=True)
class IntervalMetrics:
    engine: Engine
    started_at: float
    ended_at: float
    prompt_tokens: float | None
    generation_tokens: float | None
    spec_drafts: float | None
    spec_draft_tokens: float | None
    spec_accepted_tokens: float | None
    # From counter differences where the engine exports the counters; else the mean of its
    # gauge at the interval's snapshots (see the `_source` fields).
    accept_length: float | None
    acceptance_rate: float | None
    accept_length_source: Source
    acceptance_rate_source: Source
    ttft: HistogramSummary | None
    itl: HistogramSummary | None
    e2e: HistogramSummary | None
    reset: bool = False
    appeared: tuple[SeriesRef, ...] = ()
    disappeared: tuple[SeriesRef, ...] = ()
    requests: float | None = None
    # Tokens per engine decode step (what explains throughput), beside accept length per
    # drafted step (what describes the drafter): they differ when the proposer skips steps
    # (vLLM ngram) or `max_tokens` cuts accepted tokens.
    tokens_per_step: float | None = None
    tokens_per_step_source: Source = None
    # The engine's TTFT histogram cannot resolve TTFTs below this (its first bucket bound).
    ttft_resolution_s: float | None = None
    # Share of prompt tokens the server found in its prefix cache over the interval: vLLM's
    # Δhits / Δqueries ("counters"), else the mean of SGLang's gauge at the interval's later
    # snapshots ("gauge": each covers its last prefill batch only).
    prefix_cache_hit_rate: float | None = None
    prefix_cache_hit_rate_source: Source = None

    @property
    def ttft_bucket_limited(self) -> bool:
        """The TTFT median lies in the histogram's first bucket [0, ttft_resolution_s]: the
        quantiles there are an interpolation (a 30 ms TTFT reads 50 ms under SGLang's 0.1 s
        floor), not a measurement. The mean (sum / count) stays exact."""
        floor, ttft = self.ttft_resolution_s, self.ttft
        return floor is not None and ttft is not None and ttft.p50 is not None and ttft.p50 <= floor

    @property
    def duration_s(self) -> float:
        return self.ended_at - self.started_at

    @property
    def generation_tps(self) -> float | None:
        return _rate(self.generation_tokens, self.duration_s)

    @property
    def prompt_tps(self) -> float | None:
        return _rate(self.prompt_tokens, self.duration_s)


@dataclass
class _Raw:
    counters: dict[CounterKey, float] = field(default_factory=dict)
    histograms: dict[LatencyKey, Histogram] = field(default_factory=dict)
    reset: bool = False
    appeared: list[SeriesRef] = field(default_factory=list)
    disappeared: list[SeriesRef] = field(default_factory=list)


def counter_increase(before: float | None, after: float) -> tuple[float, bool]:
    """(increase, reset) of one counter series; a missing `before` counts from 0."""
    if before is None:
        return after, False
    if after < before:
        return after, True
    return after - before, False


def histogram_increase(before: Histogram | None, after: Histogram) -> tuple[Histogram, bool]:
    """(increase, reset) of one histogram series; a changed bucket layout counts as a reset."""
    if before is None:
        return after, False
    decreased = after.count < before.count or any(
        a < b for a, b in zip(after.cumulative, before.cumulative, strict=False)
    )
    if before.bounds != after.bounds or decreased:
        return after, True
    return Histogram(
        bounds=after.bounds,
        cumulative=tuple(a - b for a, b in zip(after.cumulative, before.cumulative, strict=True)),
        sum=after.sum - before.sum,
        count=after.count - before.count,
    ), False


def histogram_quantile(histogram: Histogram, q: float) -> float | None:
    """Prometheus `histogram_quantile`: linear interpolation inside the bucket holding rank q."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    if not histogram.cumulative or histogram.cumulative[-1] <= 0:
        return None
    rank = q * histogram.cumulative[-1]
    for i, (upper, cumulative) in enumerate(
        zip(histogram.bounds, histogram.cumulative, strict=True)
    ):
        if cumulative < rank:
            continue
        if math.isinf(upper):
            # Past the last finite bound nothing better than that bound is known.
            return histogram.bounds[i - 1] if i > 0 else None
        lower = histogram.bounds[i - 1] if i > 0 else min(0.0, upper)
        below = histogram.cumulative[i - 1] if i > 0 else 0.0
        inside = cumulative - below
        return upper if inside <= 0 else lower + (upper - lower) * (rank - below) / inside
    return None


def summarize_histogram(histogram: Histogram) -> HistogramSummary:
    return HistogramSummary(
        count=histogram.count,
        mean=histogram.sum / histogram.count if histogram.count > 0 else None,
        p50=histogram_quantile(histogram, 0.5),
        p90=histogram_quantile(histogram, 0.9),
        p99=histogram_quantile(histogram, 0.99),
    )


def interval_between(before: EngineMetrics, after: EngineMetrics) -> IntervalMetrics:
    """Figures for the interval between two scrapes of the same server."""
    return interval_over([before, after])


def interval_over(snapshots: Sequence[EngineMetrics]) -> IntervalMetrics:
    """Figures for the interval from the first to the last snapshot, chaining every step.

    Chaining catches a restart between two intermediate scrapes that a plain first/last
    difference would miss.
    """
    if len(snapshots) < 2:
        raise ValueError("an interval needs at least two snapshots")
    engines = {snapshot.engine for snapshot in snapshots}
    if len(engines) > 1:
        raise ValueError(f"snapshots from different engines: {sorted(engines)}")
    total = _Raw()
    for before, after in itertools.pairwise(snapshots):
        step = _step(before, after)
        for key, value in step.counters.items():
            total.counters[key] = total.counters.get(key, 0.0) + value
        for latency, histogram in step.histograms.items():
            previous = total.histograms.get(latency)
            merged = merge_histograms([previous, histogram] if previous else [histogram])
            if merged is not None:
                total.histograms[latency] = merged
        total.reset |= step.reset
        total.appeared += [ref for ref in step.appeared if ref not in total.appeared]
        total.disappeared += [ref for ref in step.disappeared if ref not in total.disappeared]
    return _finish(total, snapshots)


def interval_series(snapshots: Sequence[EngineMetrics]) -> list[IntervalMetrics]:
    """One interval per consecutive pair (for live charts)."""
    return [interval_between(a, b) for a, b in itertools.pairwise(snapshots)]


def generation_throughput(before: EngineMetrics | None, after: EngineMetrics) -> float | None:
    """The engine's own gauge where it has one, else the generation counter's rate."""
    if after.gen_throughput_tps is not None:
        return after.gen_throughput_tps
    if before is None:
        return None
    return interval_between(before, after).generation_tps


def _step(before: EngineMetrics, after: EngineMetrics) -> _Raw:
    restarted = (
        before.process_start_time is not None
        and after.process_start_time is not None
        and after.process_start_time != before.process_start_time
    )
    raw = _Raw(reset=restarted)
    for key in set(before.counters) | set(after.counters):
        old = {} if restarted else before.counters.get(key, {})
        new = after.counters.get(key, {})
        raw.disappeared += _refs(key, (labels for labels in old if labels not in new))
        if not new:
            continue
        if not restarted:
            raw.appeared += _refs(key, (labels for labels in new if labels not in old))
        increase = 0.0
        for labels, value in new.items():
            delta, reset = counter_increase(old.get(labels), value)
            increase += delta
            raw.reset |= reset
        raw.counters[key] = increase
    for latency in set(before.histograms) | set(after.histograms):
        old_h = {} if restarted else before.histograms.get(latency, {})
        new_h = after.histograms.get(latency, {})
        raw.disappeared += _refs(latency, (labels for labels in old_h if labels not in new_h))
        if not restarted:
            raw.appeared += _refs(latency, (labels for labels in new_h if labels not in old_h))
        parts = []
        for labels, histogram in new_h.items():
            delta_h, reset = histogram_increase(old_h.get(labels), histogram)
            parts.append(delta_h)
            raw.reset |= reset
        merged = merge_histograms(parts)
        if merged is not None:
            raw.histograms[latency] = merged
    return raw


def _refs(metric: str, labels: Iterable[LabelKey]) -> list[SeriesRef]:
    return [SeriesRef(metric=metric, labels=key) for key in labels]


def _finish(raw: _Raw, snapshots: Sequence[EngineMetrics]) -> IntervalMetrics:
    first, last = snapshots[0], snapshots[-1]
    drafts = raw.counters.get(CounterKey.SPEC_DRAFTS)
    draft_tokens = raw.counters.get(CounterKey.SPEC_DRAFT_TOKENS)
    accepted = raw.counters.get(CounterKey.SPEC_ACCEPTED_TOKENS)
    generated = raw.counters.get(CounterKey.GENERATION_TOKENS)
    requests = raw.counters.get(CounterKey.REQUESTS)
    decode_tokens = None if generated is None else generated - (requests or 0.0)
    length = accept_length(accepted, drafts, includes_bonus=last.accepted_includes_bonus)
    rate = acceptance_rate(accepted, draft_tokens)
    length_source: Source = "counters" if length is not None else None
    rate_source: Source = "counters" if rate is not None else None
    steps_source: Source = None
    tokens_per_step = None
    if last.accept_from_generation and accepted is None and drafts is not None:
        # SGLang: no accepted-token counter; both counters move at request finish, so over a
        # level they cover the same requests. The gauge is never used while this exists.
        length = decode_tokens / drafts if decode_tokens is not None and drafts > 0 else None
        length_source = "verify_counters" if length is not None else None
        tokens_per_step, steps_source = length, length_source
    itl = raw.histograms.get(LatencyKey.ITL)
    if last.itl_per_engine_step and itl is not None and itl.count > 0 and requests is not None:
        tokens_per_step = None if decode_tokens is None else decode_tokens / itl.count
        steps_source = "itl_counters" if tokens_per_step is not None else None
    # A gauge stands in only when the counter that defines the figure is not exported at all.
    if drafts is None:
        length = _gauge_mean([s.spec_accept_length for s in snapshots[1:]])
        length_source = "gauge" if length is not None else None
    if draft_tokens is None:
        rate = _gauge_mean([s.spec_accept_rate for s in snapshots[1:]])
        rate_source = "gauge" if rate is not None else None

    hit_rate, hit_source = _prefix_cache_hit_rate(raw, snapshots)

    def summary(key: LatencyKey) -> HistogramSummary | None:
        histogram = raw.histograms.get(key)
        return summarize_histogram(histogram) if histogram is not None else None

    return IntervalMetrics(
        engine=last.engine,
        started_at=first.scraped_at,
        ended_at=last.scraped_at,
        prompt_tokens=raw.counters.get(CounterKey.PROMPT_TOKENS),
        generation_tokens=raw.counters.get(CounterKey.GENERATION_TOKENS),
        spec_drafts=drafts,
        spec_draft_tokens=draft_tokens,
        spec_accepted_tokens=accepted,
        accept_length=length,
        acceptance_rate=rate,
        accept_length_source=length_source,
        acceptance_rate_source=rate_source,
        ttft=summary(LatencyKey.TTFT),
        itl=summary(LatencyKey.ITL),
        e2e=summary(LatencyKey.E2E),
        reset=raw.reset,
        appeared=tuple(raw.appeared),
        disappeared=tuple(raw.disappeared),
        requests=requests,
        tokens_per_step=tokens_per_step,
        tokens_per_step_source=steps_source,
        ttft_resolution_s=last.ttft_resolution_s,
        prefix_cache_hit_rate=hit_rate,
        prefix_cache_hit_rate_source=hit_source,
    )


def _prefix_cache_hit_rate(
    raw: _Raw, snapshots: Sequence[EngineMetrics]
) -> tuple[float | None, Source]:
    queries = raw.counters.get(CounterKey.PREFIX_CACHE_QUERIES)
    hits = raw.counters.get(CounterKey.PREFIX_CACHE_HITS)
    if queries is not None and hits is not None:
        return (hits / queries, "counters") if queries > 0 else (None, None)
    # Zeros count here (a level whose prompts share nothing reads 0), unlike the spec gauges.
    present = [s.cache_hit_rate for s in snapshots[1:] if s.cache_hit_rate is not None]
    return (math.fsum(present) / len(present), "gauge") if present else (None, None)


def _gauge_mean(values: Iterable[float | None]) -> float | None:
    # SGLang's gauges report 0 while speculation is off or no decode window has closed yet.
    present = [value for value in values if value is not None and value > 0]
    return math.fsum(present) / len(present) if present else None


def _rate(amount: float | None, seconds: float) -> float | None:
    if amount is None or seconds <= 0:
        return None
    return amount / seconds
