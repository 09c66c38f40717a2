"""Which Prometheus names each engine uses for the common, engine-independent metric set.

Every common metric maps to a tuple of candidate names, tried in order; the first one present
in a scrape wins. Older and newer spellings sit side by side, so one profile reads several
releases. To read a server that names things differently (the project's simulator, a fork),
derive a profile with `with_names`:

    profile = with_names(SGLANG, counters={CounterKey.SPEC_DRAFTS: ("sim:drafts_total",)})
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from hosts.telemetry import llamacpp


class Engine(StrEnum):
    SGLANG = "sglang"
    VLLM = "vllm"
    LLAMACPP = "llamacpp"


class GaugeKey(StrEnum):
    RUNNING = "running_requests"
    QUEUED = "queued_requests"
    GEN_THROUGHPUT = "gen_throughput_tps"
    KV_USAGE = "kv_usage"
    # Not reported in the common set: the weight for the KV usage mean across replicas.
    KV_CAPACITY = "kv_capacity"
    SPEC_ACCEPT_LENGTH = "spec_accept_length"
    SPEC_ACCEPT_RATE = "spec_accept_rate"
    # SGLang: the share of prompt tokens found in its radix cache, set at each prefill log (its
    # last prefill batch, not an interval); vLLM has counters instead.
    CACHE_HIT_RATE = "cache_hit_rate"


class CounterKey(StrEnum):
    PROMPT_TOKENS = "prompt_tokens"
    GENERATION_TOKENS = "generation_tokens"
    # Verify steps (one per sequence per speculative step): the denominator of accept length.
    SPEC_DRAFTS = "spec_drafts"
    # Tokens proposed by the draft model: the denominator of acceptance rate.
    SPEC_DRAFT_TOKENS = "spec_draft_tokens"
    SPEC_ACCEPTED_TOKENS = "spec_accepted_tokens"
    # Finished requests: each one's first token came from prefill, not from a decode step.
    REQUESTS = "requests"
    # Prompt tokens looked up in the prefix cache, and those found there (vLLM V1).
    PREFIX_CACHE_QUERIES = "prefix_cache_queries"
    PREFIX_CACHE_HITS = "prefix_cache_hits"


class LatencyKey(StrEnum):
    TTFT = "ttft"
    ITL = "itl"
    E2E = "e2e"


@dataclass(frozen=True)
class EngineProfile:
    engine: Engine
    gauges: Mapping[GaugeKey, tuple[str, ...]]
    counters: Mapping[CounterKey, tuple[str, ...]]
    # Histogram base names, without `_bucket` / `_sum` / `_count`.
    histograms: Mapping[LatencyKey, tuple[str, ...]]
    # Labels that split one replica into shards that all see the same batch (tensor / pipeline
    # / expert parallel ranks): their copies are collapsed, not summed. Every other label
    # (`dp_rank`, vLLM's `engine`, `model_name`) tells replicas apart, and replicas are summed.
    shard_labels: frozenset[str] = frozenset({"tp_rank", "pp_rank", "moe_ep_rank"})
    # Set when the accepted-token counter also counts each verify step's bonus token (as
    # SGLang's internal `spec_num_accepted_tokens` does): accept length is then
    # accepted / drafts rather than vLLM's 1 + accepted / drafts.
    accepted_includes_bonus: bool = False
    # Set where the engine counts verify steps but neither drafted nor accepted tokens (SGLang
    # exports only `spec_verify_calls_total`): accept length over an interval is then
    # (generation tokens - requests) / verify calls, every decode step being a verify step.
    accept_from_generation: bool = False
    # Set where one ITL histogram sample is one engine step's output, whatever its token count
    # (vLLM): its `_count` then counts decode steps, and tokens per engine step is
    # (generation tokens - requests) / ITL count. SGLang's ITL is per token.
    itl_per_engine_step: bool = False
    # Default TTFT bucket bounds start here (seconds): a TTFT below it reads as a bucket
    # interpolation, not a measurement. SGLang's default buckets start at 0.1 s.
    ttft_resolution_s: float | None = None


def with_names(
    profile: EngineProfile,
    *,
    gauges: Mapping[GaugeKey, tuple[str, ...]] | None = None,
    counters: Mapping[CounterKey, tuple[str, ...]] | None = None,
    histograms: Mapping[LatencyKey, tuple[str, ...]] | None = None,
    shard_labels: frozenset[str] | None = None,
    accepted_includes_bonus: bool | None = None,
) -> EngineProfile:
    """A copy of `profile` with some candidate names replaced (other keys are kept)."""
    return dataclasses.replace(
        profile,
        gauges={**profile.gauges, **(gauges or {})},
        counters={**profile.counters, **(counters or {})},
        histograms={**profile.histograms, **(histograms or {})},
        shard_labels=profile.shard_labels if shard_labels is None else shard_labels,
        accepted_includes_bonus=(
            profile.accepted_includes_bonus
            if accepted_includes_bonus is None
            else accepted_includes_bonus
        ),
    )


SGLANG = EngineProfile(
    engine=Engine.SGLANG,
    gauges={
        GaugeKey.RUNNING: ("sglang:num_running_reqs",),
        GaugeKey.QUEUED: ("sglang:num_queue_reqs",),
        GaugeKey.GEN_THROUGHPUT: ("sglang:gen_throughput",),
        GaugeKey.KV_USAGE: ("sglang:token_usage",),
        GaugeKey.KV_CAPACITY: ("sglang:max_total_num_tokens",),
        # Over the scheduler's last decode-log window, not the server's lifetime.
        GaugeKey.SPEC_ACCEPT_LENGTH: ("sglang:spec_accept_length",),
        GaugeKey.CACHE_HIT_RATE: ("sglang:cache_hit_rate",),
        GaugeKey.SPEC_ACCEPT_RATE: ("sglang:spec_accept_rate",),
    },
    counters={
        CounterKey.PROMPT_TOKENS: ("sglang:prompt_tokens_total",),
        CounterKey.GENERATION_TOKENS: ("sglang:generation_tokens_total",),
        # SGLang 0.5.23's only speculative counter (srt/metrics/collector.py): one per verify
        # pass per request, added with generation_tokens_total when the request finishes.
        # There is no drafted- or accepted-token counter, hence `accept_from_generation`.
        CounterKey.SPEC_DRAFTS: ("sglang:spec_verify_calls_total",),
        # Label `is_streaming`: its series are summed like replicas.
        CounterKey.REQUESTS: ("sglang:num_requests_total",),
    },
    histograms={
        LatencyKey.TTFT: ("sglang:time_to_first_token_seconds",),
        LatencyKey.ITL: (
            "sglang:inter_token_latency_seconds",
            "sglang:time_per_output_token_seconds",
        ),
        LatencyKey.E2E: ("sglang:e2e_request_latency_seconds",),
    },
    accept_from_generation=True,
    ttft_resolution_s=0.1,
)

VLLM = EngineProfile(
    engine=Engine.VLLM,
    gauges={
        GaugeKey.RUNNING: ("vllm:num_requests_running",),
        GaugeKey.QUEUED: ("vllm:num_requests_waiting",),
        # V0 only; V1 has no throughput gauge, so the counter rate is used.
        GaugeKey.GEN_THROUGHPUT: ("vllm:avg_generation_throughput_toks_per_s",),
        # A fraction (1 = full) despite the `_perc` suffix.
        GaugeKey.KV_USAGE: ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    },
    counters={
        CounterKey.PROMPT_TOKENS: ("vllm:prompt_tokens_total",),
        CounterKey.GENERATION_TOKENS: ("vllm:generation_tokens_total",),
        CounterKey.SPEC_DRAFTS: ("vllm:spec_decode_num_drafts_total",),
        CounterKey.SPEC_DRAFT_TOKENS: ("vllm:spec_decode_num_draft_tokens_total",),
        CounterKey.SPEC_ACCEPTED_TOKENS: ("vllm:spec_decode_num_accepted_tokens_total",),
        # Label `finished_reason`: summed.
        CounterKey.REQUESTS: ("vllm:request_success_total",),
        # Both in tokens (vLLM 0.32's help texts: "number of queried tokens", "number of
        # cached tokens"; tests/hosts/telemetry/data/vllm_cpu_0_32_scrape2.prom).
        CounterKey.PREFIX_CACHE_QUERIES: ("vllm:prefix_cache_queries_total",),
        CounterKey.PREFIX_CACHE_HITS: ("vllm:prefix_cache_hits_total",),
    },
    histograms={
        LatencyKey.TTFT: ("vllm:time_to_first_token_seconds",),
        LatencyKey.ITL: ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        LatencyKey.E2E: ("vllm:e2e_request_latency_seconds",),
    },
    itl_per_engine_step=True,
)

# llama.cpp's names live in their own module, read against a real build.
LLAMACPP = EngineProfile(
    engine=Engine.LLAMACPP,
    gauges={GaugeKey(key): names for key, names in llamacpp.GAUGES.items()},
    counters={CounterKey(key): names for key, names in llamacpp.COUNTERS.items()},
    histograms={},
)

PROFILES: Mapping[Engine, EngineProfile] = {
    Engine.SGLANG: SGLANG,
    Engine.VLLM: VLLM,
    Engine.LLAMACPP: LLAMACPP,
}
