from __future__ import annotations

import math
from pathlib import Path

import pytest

from hosts.telemetry.engine_profiles import (
    SGLANG,
    CounterKey,
    Engine,
    LatencyKey,
    with_names,
)
from hosts.telemetry.prometheus import (
    Histogram,
    MetricsParseError,
    detect_engine,
    merge_histograms,
    parse_engine_metrics,
    parse_samples,
)

DATA = Path(__file__).parent / "data"


def scrape(name: str, at: float = 0.0):
    return parse_engine_metrics((DATA / name).read_text(), scraped_at=at)


def test_engine_is_detected_from_the_name_prefix():
    for engine in Engine:
        text = (DATA / f"{engine.value}_scrape1.prom").read_text()
        assert detect_engine(parse_samples(text)) is engine
    assert detect_engine(parse_samples("process_cpu_seconds_total 3\n")) is None


def test_unknown_text_is_an_error():
    with pytest.raises(MetricsParseError):
        parse_engine_metrics("up 1\n", scraped_at=0.0)
    with pytest.raises(MetricsParseError):
        parse_engine_metrics('sglang:x{tp_rank="0" 1\n', scraped_at=0.0)


def test_sglang_dp_attention_replicas_across_eight_ranks_are_summed():
    # tp=8 with DP attention: each of the 8 schedulers is its own replica (dp_rank 0..7).
    metrics = scrape("sglang_scrape1.prom", at=12.5)

    assert metrics.engine is Engine.SGLANG
    assert metrics.scraped_at == 12.5
    assert metrics.running_requests == sum(16 + rank for rank in range(8))
    assert metrics.queued_requests == 0
    assert metrics.gen_throughput_tps == sum(1000 + 10 * rank for rank in range(8))
    # Ratios are averaged, weighted by each replica's KV pool (equal here).
    assert metrics.kv_usage == pytest.approx(0.135)
    assert metrics.spec_accept_length == pytest.approx(2.5)
    assert metrics.spec_accept_rate == pytest.approx(0.375)
    assert metrics.prompt_tokens_total == 2_000_000
    assert metrics.generation_tokens_total == 400_000
    assert len(metrics.counters[CounterKey.SPEC_DRAFTS]) == 8
    # SGLang's verify calls (its only speculative counter), and requests (is_streaming summed).
    assert metrics.counter_total(CounterKey.SPEC_DRAFTS) == 160_000
    assert metrics.counter_total(CounterKey.REQUESTS) == 100
    assert metrics.lifetime_accept_length() == pytest.approx((400_000 - 100) / 160_000)


def test_sglang_histograms_keep_buckets_sum_and_count():
    metrics = scrape("sglang_scrape1.prom")
    ttft = metrics.histogram_total(LatencyKey.TTFT)

    assert ttft is not None
    assert ttft.count == 100
    assert ttft.sum == pytest.approx(40 * 0.15 + 50 * 0.5 + 10 * 1.5)
    assert ttft.bounds[-1] == math.inf
    assert ttft.cumulative[ttft.bounds.index(0.2)] == 40
    assert ttft.cumulative[-1] == 100
    assert set(metrics.histograms) == {LatencyKey.TTFT, LatencyKey.ITL, LatencyKey.E2E}


SGLANG_PURE_TP = "".join(
    [
        "# HELP sglang:num_running_reqs The number of running requests.\n",
        "# TYPE sglang:num_running_reqs gauge\n",
        *(
            f'sglang:num_running_reqs{{model_name="m",tp_rank="{rank}",pp_rank="0"}} 48.0\n'
            for rank in range(8)
        ),
        "# HELP sglang:token_usage The token usage.\n",
        "# TYPE sglang:token_usage gauge\n",
        *(
            f'sglang:token_usage{{model_name="m",tp_rank="{rank}",pp_rank="0"}} 0.5\n'
            for rank in range(8)
        ),
        "# HELP sglang:generation_tokens_total Number of generation tokens processed.\n",
        "# TYPE sglang:generation_tokens_total counter\n",
        *(
            f'sglang:generation_tokens_total{{model_name="m",tp_rank="{rank}"}} 1000.0\n'
            for rank in range(8)
        ),
    ]
)


def test_sglang_pure_tensor_parallel_ranks_are_one_replica_not_eight():
    # With metrics on every scheduler and no DP, all 8 TP ranks report the same batch.
    metrics = parse_engine_metrics(SGLANG_PURE_TP, scraped_at=0.0)

    assert metrics.running_requests == 48
    assert metrics.kv_usage == 0.5
    assert metrics.generation_tokens_total == 1000


def test_shard_collapse_can_be_switched_off_to_sum_every_rank():
    profile = with_names(SGLANG, shard_labels=frozenset())
    metrics = parse_engine_metrics(SGLANG_PURE_TP, scraped_at=0.0, profile=profile)

    assert metrics.running_requests == 8 * 48
    assert metrics.generation_tokens_total == 8000


def test_vllm_maps_to_the_common_set():
    metrics = scrape("vllm_scrape1.prom")

    assert metrics.engine is Engine.VLLM
    assert metrics.running_requests == 24
    assert metrics.queued_requests == 3
    assert metrics.kv_usage == pytest.approx(0.42)
    assert metrics.gen_throughput_tps is None  # V1 has no gauge: use the counter rate
    assert metrics.spec_accept_length is None
    assert metrics.prompt_tokens_total == 5_000_000
    assert metrics.counter_total(CounterKey.SPEC_DRAFT_TOKENS) == 900_000
    # 1 + accepted / drafts, over the server's life.
    assert metrics.lifetime_accept_length() == pytest.approx(1 + 540_000 / 300_000)
    itl = metrics.histogram_total(LatencyKey.ITL)
    assert itl is not None
    assert itl.count == 10_000


def test_vllm_data_parallel_engines_are_summed_and_usage_averaged():
    text = "".join(
        [
            "# TYPE vllm:num_requests_running gauge\n",
            'vllm:num_requests_running{engine="0",model_name="m"} 10\n',
            'vllm:num_requests_running{engine="1",model_name="m"} 30\n',
            "# TYPE vllm:kv_cache_usage_perc gauge\n",
            'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.2\n',
            'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.6\n',
        ]
    )
    metrics = parse_engine_metrics(text, scraped_at=0.0)

    assert metrics.running_requests == 40
    assert metrics.kv_usage == pytest.approx(0.4)


def test_accept_length_gauge_is_weighted_by_running_requests():
    text = "".join(
        [
            'sglang:num_running_reqs{dp_rank="0",tp_rank="0"} 30\n',
            'sglang:num_running_reqs{dp_rank="1",tp_rank="1"} 10\n',
            'sglang:spec_accept_length{dp_rank="0",tp_rank="0"} 3.0\n',
            'sglang:spec_accept_length{dp_rank="1",tp_rank="1"} 2.0\n',
        ]
    )
    metrics = parse_engine_metrics(text, scraped_at=0.0)

    assert metrics.spec_accept_length == pytest.approx((3.0 * 30 + 2.0 * 10) / 40)


def test_llamacpp_maps_to_the_common_set():
    metrics = scrape("llamacpp_scrape1.prom")

    assert metrics.engine is Engine.LLAMACPP
    assert metrics.running_requests == 4
    assert metrics.queued_requests == 2
    assert metrics.kv_usage == pytest.approx(0.4375)
    # predicted_tokens_seconds is per-slot decode speed, not throughput.
    assert metrics.gen_throughput_tps is None
    assert metrics.generation_tokens_total == 96_000
    assert metrics.counter_total(CounterKey.SPEC_DRAFT_TOKENS) == 120_000
    assert metrics.counter_total(CounterKey.SPEC_ACCEPTED_TOKENS) == 72_000
    # No verify-step counter: no accept length, only an acceptance rate (see deltas).
    assert metrics.lifetime_accept_length() is None
    assert metrics.histograms == {}


def test_llamacpp_older_counter_spellings_are_read():
    text = "llamacpp:tokens_drafted_total 10\nllamacpp:tokens_drafted_accepted_total 7\n"
    metrics = parse_engine_metrics(text, scraped_at=0.0, engine=Engine.LLAMACPP)

    assert metrics.counter_total(CounterKey.SPEC_DRAFT_TOKENS) == 10
    assert metrics.counter_total(CounterKey.SPEC_ACCEPTED_TOKENS) == 7


def test_counter_names_are_configurable():
    profile = with_names(
        SGLANG,
        counters={
            CounterKey.SPEC_DRAFTS: ("sim:verify_steps_total",),
            CounterKey.SPEC_ACCEPTED_TOKENS: ("sim:accepted_total",),
        },
        accepted_includes_bonus=True,
    )
    text = "sim:verify_steps_total 100\nsim:accepted_total 320\n"
    metrics = parse_engine_metrics(text, scraped_at=0.0, profile=profile)

    assert metrics.lifetime_accept_length() == pytest.approx(3.2)
    # The other names are untouched.
    assert profile.counters[CounterKey.PROMPT_TOKENS] == ("sglang:prompt_tokens_total",)


def test_nan_gauges_are_missing_and_process_start_time_is_kept():
    text = "sglang:token_usage NaN\nprocess_start_time_seconds 1.7e9\n"
    metrics = parse_engine_metrics(text, scraped_at=0.0, engine=Engine.SGLANG)

    assert metrics.kv_usage is None
    assert metrics.process_start_time == 1.7e9


def test_histogram_without_inf_bucket_gets_one_from_count():
    text = (
        'vllm:e2e_request_latency_seconds_bucket{le="1.0"} 3\n'
        "vllm:e2e_request_latency_seconds_count 5\n"
    )
    metrics = parse_engine_metrics(text, scraped_at=0.0)
    e2e = metrics.histogram_total(LatencyKey.E2E)

    assert e2e is not None
    assert e2e.bounds == (1.0, math.inf)
    assert e2e.cumulative == (3, 5)


def test_merge_keeps_only_shared_bounds():
    a = Histogram(bounds=(0.1, 1.0, math.inf), cumulative=(1, 2, 3), sum=1.0, count=3)
    b = Histogram(bounds=(0.5, 1.0, math.inf), cumulative=(4, 5, 6), sum=2.0, count=6)

    merged = merge_histograms([a, b])

    assert merged == Histogram(bounds=(1.0, math.inf), cumulative=(7, 9), sum=3.0, count=9)
    assert merge_histograms([]) is None


def test_sglang_priority_gauges_are_not_double_summed():
    # SGLang with --enable-priority-scheduling (srt/metrics/collector.py, 0.5.23): a total
    # series (priority="") beside per-priority ones. Summing all would double every count.
    text = "\n".join([
        'sglang:num_running_reqs{priority="",tp_rank="0"} 6',
        'sglang:num_running_reqs{priority="0",tp_rank="0"} 4',
        'sglang:num_running_reqs{priority="1",tp_rank="0"} 2',
        'sglang:num_queue_reqs{priority="",tp_rank="0"} 3',
        'sglang:num_queue_reqs{priority="1",tp_rank="0"} 3',
        "",
    ])  # fmt: skip
    metrics = parse_engine_metrics(text, scraped_at=0.0, engine=Engine.SGLANG)

    assert (metrics.running_requests, metrics.queued_requests) == (6, 3)
