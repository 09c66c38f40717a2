"""Prometheus exposition text -> an engine-independent `EngineMetrics` snapshot.

Parsing is done by `prometheus_client`'s maintained text parser. Samples are then looked up by
their exact sample name (`vllm:prompt_tokens_total`, `sglang:ttft_seconds_bucket`), which does
not depend on the `# TYPE` lines being present or consistent.

Label fan-out is aggregated explicitly, per metric kind:

- shard copies (labels in `EngineProfile.shard_labels`: tp_rank, pp_rank, moe_ep_rank) report
  the same batch, so they collapse to one value per replica: the max for counts and counters,
  the mean for ratios, the copy with the largest `_count` for histograms;
- replicas (every other label: dp_rank, vLLM's engine, model_name) are then summed for counts
  (running, queued, throughput), counters and histograms (bucket by bucket), and averaged for
  ratios: KV usage weighted by each replica's KV capacity, accept length / rate weighted by
  each replica's running requests, plain mean where a weight is missing or all weights are 0.

Counters and histograms keep one series per replica in the snapshot, so that `deltas` can
detect a reset or an appearing replica per series before summing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from hosts.telemetry.engine_profiles import (
    PROFILES,
    CounterKey,
    Engine,
    EngineProfile,
    GaugeKey,
    LatencyKey,
)

LabelKey = tuple[tuple[str, str], ...]
_START_TIME = "process_start_time_seconds"
Samples = Mapping[str, Mapping[LabelKey, float]]


class MetricsParseError(ValueError):
    pass


@dataclass(frozen=True)
class Histogram:
    # Ascending upper bounds (`le`), the last one +inf, with their cumulative counts.
    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float


@dataclass(frozen=True)
class EngineMetrics:
    engine: Engine
    # Seconds on the caller's clock when the scrape answered; use one clock for a series.
    scraped_at: float
    running_requests: float | None
    queued_requests: float | None
    # The engine's own gauge only (SGLang: last decode-log window); see `deltas` for rates.
    gen_throughput_tps: float | None
    # Fraction of KV cache / token pool in use, 0..1.
    kv_usage: float | None
    # Gauges as the engine reports them (SGLang: last decode-log window).
    spec_accept_length: float | None
    spec_accept_rate: float | None
    counters: Mapping[CounterKey, Mapping[LabelKey, float]]
    histograms: Mapping[LatencyKey, Mapping[LabelKey, Histogram]]
    accepted_includes_bonus: bool = False
    accept_from_generation: bool = False
    itl_per_engine_step: bool = False
    ttft_resolution_s: float | None = None
    # `process_start_time_seconds` where exported (earliest across processes): a change between
    # two scrapes means the server restarted, even when its counters have already passed their
    # old values.
    process_start_time: float | None = None
    # The ITL histogram read (the profile's first present name): SGLang's fallback,
    # `time_per_output_token_seconds`, holds one sample per request (its TPOT), not per token.
    itl_histogram: str | None = None
    # SGLang's cache hit rate gauge (its last prefill batch), 0..1.
    cache_hit_rate: float | None = None

    def counter_total(self, key: CounterKey) -> float | None:
        series = self.counters.get(key)
        return math.fsum(series.values()) if series else None

    def histogram_total(self, key: LatencyKey) -> Histogram | None:
        series = self.histograms.get(key)
        return merge_histograms(series.values()) if series else None

    @property
    def prompt_tokens_total(self) -> float | None:
        return self.counter_total(CounterKey.PROMPT_TOKENS)

    @property
    def generation_tokens_total(self) -> float | None:
        return self.counter_total(CounterKey.GENERATION_TOKENS)

    def lifetime_accept_length(self) -> float | None:
        """Over the server's whole life: for display only, never for one run (see `deltas`)."""
        if self.accept_from_generation and CounterKey.SPEC_ACCEPTED_TOKENS not in self.counters:
            generated = self.counter_total(CounterKey.GENERATION_TOKENS)
            verify = self.counter_total(CounterKey.SPEC_DRAFTS)
            if generated is None or not verify:
                return None
            return (generated - (self.counter_total(CounterKey.REQUESTS) or 0.0)) / verify
        return accept_length(
            self.counter_total(CounterKey.SPEC_ACCEPTED_TOKENS),
            self.counter_total(CounterKey.SPEC_DRAFTS),
            includes_bonus=self.accepted_includes_bonus,
        )


def accept_length(
    accepted: float | None, drafts: float | None, *, includes_bonus: bool = False
) -> float | None:
    if accepted is None or drafts is None or drafts <= 0:
        return None
    return accepted / drafts if includes_bonus else 1.0 + accepted / drafts


def acceptance_rate(accepted: float | None, draft_tokens: float | None) -> float | None:
    if accepted is None or draft_tokens is None or draft_tokens <= 0:
        return None
    return accepted / draft_tokens


def parse_samples(text: str) -> dict[str, dict[LabelKey, float]]:
    """Every sample in the text, by sample name and sorted label pairs; NaN values dropped."""
    out: dict[str, dict[LabelKey, float]] = defaultdict(dict)
    try:
        families: list[Any] = list(text_string_to_metric_families(text))
    except Exception as exc:  # the parser raises ValueError, IndexError, ... on bad input
        raise MetricsParseError(f"unparsable Prometheus text: {exc}") from exc
    for family in families:
        for sample in family.samples:
            value = float(sample.value)
            if math.isnan(value):
                continue
            labels: dict[str, str] = sample.labels
            out[str(sample.name)][tuple(sorted(labels.items()))] = value
    return dict(out)


def detect_engine(samples: Samples) -> Engine | None:
    """The engine whose name prefix (`sglang:`, `vllm:`, `llamacpp:`) most samples carry."""
    counts = {engine: 0 for engine in Engine}
    for name in samples:
        prefix = name.partition(":")[0]
        if prefix in counts:
            counts[Engine(prefix)] += 1
    engine, count = max(counts.items(), key=lambda item: item[1])
    return engine if count else None


def parse_engine_metrics(
    text: str,
    *,
    scraped_at: float,
    engine: Engine | None = None,
    profile: EngineProfile | None = None,
) -> EngineMetrics:
    """Parse one `/metrics` scrape into the common set (engine detected when not given)."""
    samples = parse_samples(text)
    if profile is None:
        engine = engine or detect_engine(samples)
        if engine is None:
            raise MetricsParseError("no SGLang, vLLM or llama.cpp metrics in the scrape")
        profile = PROFILES[engine]
    return engine_metrics_from_samples(samples, profile=profile, scraped_at=scraped_at)


def engine_metrics_from_samples(
    samples: Samples, *, profile: EngineProfile, scraped_at: float
) -> EngineMetrics:
    shards = profile.shard_labels

    def gauge(key: GaugeKey) -> Mapping[LabelKey, float]:
        return _without_priority_split(_first_present(samples, profile.gauges.get(key, ())))

    running = _collapse(gauge(GaugeKey.RUNNING), shards, max)
    capacity = _collapse(gauge(GaugeKey.KV_CAPACITY), shards, max)
    counters = {
        key: _collapse(_first_present(samples, names), shards, max)
        for key, names in profile.counters.items()
    }
    histograms = {
        key: _histogram_series(samples, names, shards) for key, names in profile.histograms.items()
    }
    itl_names = profile.histograms.get(LatencyKey.ITL, ())
    return EngineMetrics(
        engine=profile.engine,
        scraped_at=scraped_at,
        itl_histogram=next((n for n in itl_names if samples.get(f"{n}_bucket")), None),
        running_requests=_sum(running),
        queued_requests=_sum(_collapse(gauge(GaugeKey.QUEUED), shards, max)),
        gen_throughput_tps=_sum(_collapse(gauge(GaugeKey.GEN_THROUGHPUT), shards, max)),
        kv_usage=_weighted_mean(_collapse(gauge(GaugeKey.KV_USAGE), shards, _mean), capacity),
        spec_accept_length=_weighted_mean(
            _collapse(gauge(GaugeKey.SPEC_ACCEPT_LENGTH), shards, _mean), running
        ),
        spec_accept_rate=_weighted_mean(
            _collapse(gauge(GaugeKey.SPEC_ACCEPT_RATE), shards, _mean), running
        ),
        cache_hit_rate=_weighted_mean(
            _collapse(gauge(GaugeKey.CACHE_HIT_RATE), shards, _mean), running
        ),
        counters={key: series for key, series in counters.items() if series},
        histograms={key: series for key, series in histograms.items() if series},
        accepted_includes_bonus=profile.accepted_includes_bonus,
        accept_from_generation=profile.accept_from_generation,
        itl_per_engine_step=profile.itl_per_engine_step,
        ttft_resolution_s=profile.ttft_resolution_s,
        process_start_time=min(starts.values()) if (starts := samples.get(_START_TIME)) else None,
    )


def merge_histograms(histograms: Iterable[Histogram]) -> Histogram | None:
    """Bucket-by-bucket sum; where layouts differ only the bounds all of them share are kept."""
    items = list(histograms)
    if not items:
        return None
    shared = set(items[0].bounds).intersection(*(h.bounds for h in items[1:]))
    bounds = tuple(sorted(shared))
    cumulative = tuple(
        math.fsum(h.cumulative[h.bounds.index(bound)] for h in items) for bound in bounds
    )
    return Histogram(
        bounds=bounds,
        cumulative=cumulative,
        sum=math.fsum(h.sum for h in items),
        count=math.fsum(h.count for h in items),
    )


def _first_present(samples: Samples, names: Iterable[str]) -> Mapping[LabelKey, float]:
    for name in names:
        if name in samples:
            return samples[name]
    return {}


def _without_priority_split(series: Mapping[LabelKey, float]) -> Mapping[LabelKey, float]:
    """SGLang with --enable-priority-scheduling exports a gauge's total (`priority=""`) beside
    one series per priority: summing them all would count every request twice. Keep the
    total where it is there."""
    if not any(name == "priority" for labels in series for name, _ in labels):
        return series
    totals = {labels: v for labels, v in series.items() if ("priority", "") in labels}
    if not totals:
        return series
    return {tuple(p for p in labels if p[0] != "priority"): v for labels, v in totals.items()}


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return math.fsum(items) / len(items)


def _collapse(
    series: Mapping[LabelKey, float],
    shard_labels: frozenset[str],
    how: Callable[[list[float]], float],
) -> dict[LabelKey, float]:
    grouped: dict[LabelKey, list[float]] = defaultdict(list)
    for labels, value in series.items():
        grouped[_replica_key(labels, shard_labels)].append(value)
    return {key: how(values) for key, values in grouped.items()}


def _replica_key(labels: LabelKey, shard_labels: frozenset[str]) -> LabelKey:
    return tuple((name, value) for name, value in labels if name not in shard_labels)


def _sum(series: Mapping[LabelKey, float]) -> float | None:
    return math.fsum(series.values()) if series else None


def _weighted_mean(
    series: Mapping[LabelKey, float], weights: Mapping[LabelKey, float]
) -> float | None:
    if not series:
        return None
    if all(key in weights for key in series):
        total = math.fsum(weights[key] for key in series)
        if total > 0:
            return math.fsum(value * weights[key] for key, value in series.items()) / total
    return _mean(series.values())


def _histogram_series(
    samples: Samples, names: Iterable[str], shard_labels: frozenset[str]
) -> dict[LabelKey, Histogram]:
    for base in names:
        buckets = samples.get(f"{base}_bucket")
        if buckets:
            break
    else:
        return {}
    sums = samples.get(f"{base}_sum", {})
    counts = samples.get(f"{base}_count", {})
    per_series: dict[LabelKey, list[tuple[float, float]]] = defaultdict(list)
    for labels, value in buckets.items():
        le = dict(labels).get("le")
        if le is None:
            continue
        try:
            bound = float(le)
        except ValueError:
            continue
        per_series[tuple(pair for pair in labels if pair[0] != "le")].append((bound, value))
    best: dict[LabelKey, Histogram] = {}
    for labels, pairs in per_series.items():
        pairs.sort()
        count = counts.get(labels, pairs[-1][1])
        if pairs[-1][0] != math.inf:
            pairs.append((math.inf, count))
        histogram = Histogram(
            bounds=tuple(bound for bound, _ in pairs),
            cumulative=tuple(value for _, value in pairs),
            sum=sums.get(labels, 0.0),
            count=count,
        )
        replica = _replica_key(labels, shard_labels)
        if replica not in best or histogram.count > best[replica].count:
            best[replica] = histogram
    return best
