from __future__ import annotations

import random

import pytest

from benchlib.loadgen.metrics import (
    Delivery,
    deliveries,
    distribution,
    summarize_level,
)
from benchlib.loadgen.steady import steady_window, window_tokens
from benchlib.stats import intervals
from benchlib.stats.intervals import quantile
from tests.benchlib.loadgen.conftest import make_record


def two_requests():
    r1 = make_record("a", 0.0, [(0.1, 1), (0.2, 1), (0.3, 3), (0.4, 1)], slot=0)
    r2 = make_record("b", 0.05, [(0.25, 2), (0.45, 2)], end=0.5, slot=1)
    return [r1, r2]


def test_latencies_from_hand_built_records():
    s = summarize_level(two_requests(), concurrency=2)
    assert s["requests"] == {
        "total": 2,
        "ok": 2,
        "failed": 0,
        "errors_by_cause": {},
        "retried": 0,
    }
    assert s["ttft_ms"]["count"] == 2
    assert s["ttft_ms"]["mean"] == pytest.approx(150.0)
    assert s["e2e_ms"]["max"] == pytest.approx(450.0)
    assert s["e2e_ms"]["min"] == pytest.approx(400.0)
    # TPOT = (e2e - ttft) / (out - 1): 0.3/5 and 0.25/3
    lo, hi = s["tpot_ms"]["min"], s["tpot_ms"]["max"]
    assert lo is not None and hi is not None
    assert sorted([lo, hi]) == pytest.approx([60.0, 250 / 3])
    assert s["decode_tok_s"]["min"] == pytest.approx(3 / 0.25)
    assert s["decode_tok_s"]["max"] == pytest.approx(5 / 0.3)


def test_multi_token_chunk_spreads_its_gap_over_its_tokens():
    s = summarize_level(two_requests(), concurrency=2)
    # r1: gaps 0.1 (1 token), 0.1 (3 tokens -> 3 x 0.0333), 0.1 (1); r2: gap 0.2 (2 tokens -> 2 x 0.1)
    itl = s["itl_ms"]
    assert itl["count"] == 7  # output tokens minus those of each first chunk
    assert itl["min"] == pytest.approx(100 / 3)
    assert itl["p50"] == pytest.approx(100.0)
    assert itl["mean"] == pytest.approx(500 / 7)
    # the per-chunk view: one sample per gap, blind to the tokens inside
    chunk = s["itl_chunk_ms"]
    assert chunk["count"] == 4
    assert chunk["max"] == pytest.approx(200.0)
    assert chunk["p50"] == pytest.approx(100.0)
    assert s["tokens_per_chunk"] == {"1": 3, "2": 2, "3": 1}
    assert s["mean_tokens_per_chunk"] == pytest.approx(10 / 6)


def test_events_arriving_together_are_one_delivery_whose_gap_is_spread_over_its_tokens():
    # llama-server under speculation: each accepted token is its own event, tens of microseconds
    # apart, then the next verify step ~24 ms later. 1 + 3 x (4 events of 1 token).
    chunks = [(0.100, 1)]
    for step in range(1, 4):
        t = 0.100 + 0.024 * step
        chunks += [(t + 0.00003 * i, 1) for i in range(4)]
    s = summarize_level([make_record("a", 0.0, chunks)], concurrency=1)
    itl = s["itl_ms"]
    assert itl["count"] == 12  # every token after the first delivery
    assert itl["p50"] == pytest.approx(6.0)  # 24 ms over 4 tokens
    # = the decode time: from the first delivery to the last token's arrival (the last step's
    # fourth event, 90 us after its first)
    assert itl["mean"] is not None and itl["mean"] * itl["count"] == pytest.approx(72.09)
    # the per-event figure, still there, sees three quarters of the gaps as ~0
    assert s["itl_event_ms"]["p50"] == pytest.approx(0.03, abs=1e-6)
    assert s["itl_delivery_ms"]["count"] == 3 and s["itl_delivery_ms"]["p50"] == pytest.approx(24.0)
    assert s["mean_tokens_per_delivery"] == pytest.approx(13 / 4)
    assert s["mean_tokens_per_chunk"] == 1


def spans(groups: list[Delivery]) -> list[tuple[float, float, int]]:
    return [(d.first, d.last, d.tokens) for d in groups]


def test_deliveries_chain_events_closer_than_the_gap_threshold():
    groups = deliveries([0.0, 0.0005, 0.0009, 0.0030, 0.0031], [1, 2, 1, 1, 1], gap=0.001)
    assert spans(groups) == [(0.0, 0.0009, 4), (0.0030, 0.0031, 2)]
    # the default, 2 ms, bounds a delivery's span too: steps 1.9 ms apart pair up rather than
    # chaining the whole request into one delivery
    times = [0.0, 0.0019, 0.0038, 0.0057, 0.0100]
    assert spans(deliveries(times, [1] * 5)) == [
        (0.0, 0.0019, 2),
        (0.0038, 0.0057, 2),
        (0.0100, 0.0100, 1),
    ]
    # where the bound cuts through a step sent as several events, the step's events stay
    # together: 0.5 ms steps of 3 events 30 us apart, 12 tokens per delivery
    times = [s * 0.0005 + e * 0.00003 for s in range(8) for e in range(3)]
    assert [d.tokens for d in deliveries(times, [1] * 24)] == [12, 12]
    # chunks further apart than the threshold stay what they were: itl_ms is unchanged for them
    s = summarize_level(two_requests(), concurrency=2)
    assert s["itl_ms"] == s["itl_event_ms"]


def test_throughput_concurrency_and_steady_window():
    s = summarize_level(two_requests(), concurrency=2)
    assert s["duration_s"] == pytest.approx(0.5)
    assert s["output_tokens"] == 10
    assert s["output_tok_s"] == pytest.approx(20.0)
    assert s["total_tok_s"] == pytest.approx((10 + 20) / 0.5)
    assert s["achieved_concurrency"] == pytest.approx((0.4 + 0.45) / 0.5)
    steady = s["steady"]
    assert steady["reached"] is True
    assert steady["duration_s"] == pytest.approx(0.35)  # second send .. first finish
    # arrivals in (0.05, 0.4]: all 6 of r1 and r2's first chunk of 2
    assert steady["arrived_tokens"] == 8
    # token-level: r2's last chunk (2 tokens over (0.25, 0.45]) is 3/4 inside the window
    assert steady["output_tokens"] == pytest.approx(9.5)
    assert steady["output_tok_s"] == pytest.approx(9.5 / 0.35)
    assert steady["mean_in_flight"] == pytest.approx(2.0)


def test_failed_requests_are_counted_by_cause_and_kept_out_of_latencies():
    records = [
        *two_requests(),
        make_record("c", 0.1, [], end=0.1, error_kind="connect"),
        make_record("d", 0.1, [(0.2, 1)], end=0.3, error_kind="http_500"),
        make_record("e", 0.2, [], end=0.25, error_kind="connect"),
    ]
    s = summarize_level(records, concurrency=2)
    assert s["requests"]["ok"] == 2
    assert s["requests"]["failed"] == 3
    assert s["requests"]["errors_by_cause"] == {"connect": 2, "http_500": 1}
    assert s["ttft_ms"]["count"] == 2
    assert s["output_tokens"] == 10


def test_level_cut_short_is_partial_and_uses_completed_requests_only():
    records = [
        *two_requests(),
        make_record("x", 0.4, [(0.5, 1), (0.6, 1)], end=2.0, error_kind="cancelled"),
    ]
    s = summarize_level(records, concurrency=2, partial=True)
    assert s["partial"] is True
    assert s["requests"]["errors_by_cause"] == {"cancelled": 1}
    assert s["duration_s"] == pytest.approx(0.5)  # the cut request does not stretch the level
    assert s["output_tokens"] == 10
    assert s["ttft_ms"]["count"] == 2


def test_warmup_records_are_ignored():
    records = [*two_requests(), make_record("w", -1.0, [(-0.5, 1)], warmup=True)]
    assert summarize_level(records, concurrency=2) == summarize_level(two_requests(), concurrency=2)


def closed_loop_intervals():
    # slot A and slot B hand over to their next request after tiny gaps (the dips)
    return [
        (0.0, 1.0),
        (1.0001, 2.0),
        (2.0002, 3.0),
        (0.5, 1.5),
        (1.5003, 2.5),
    ]


def test_steady_window_spans_slot_handovers():
    window, level, reached = steady_window(closed_loop_intervals(), 2, dip_tolerance=0.05)
    assert reached is True
    assert level == 2
    assert window == pytest.approx((0.5, 2.5))


def test_steady_window_without_tolerance_is_the_longest_strict_interval():
    window, _, _ = steady_window(closed_loop_intervals(), 2, dip_tolerance=0.0)
    assert window == pytest.approx((0.5, 1.0))


def test_steady_window_falls_back_to_peak_when_target_not_reached():
    window, level, reached = steady_window(closed_loop_intervals(), 4)
    assert reached is False
    assert level == 2
    assert window == pytest.approx((0.5, 2.5))


def test_rate_mode_steady_window_is_the_arrival_window():
    records = [make_record(str(i), i * 0.1, [(i * 0.1 + 0.05, 1)]) for i in range(11)]
    s = summarize_level(records, concurrency=4, mode="rate")
    assert s["steady"]["duration_s"] == pytest.approx(1.0)


def test_summary_does_not_depend_on_record_order():
    rng = random.Random(3)
    records = []
    for i in range(200):
        start = rng.uniform(0, 10)
        t = start
        chunks = []
        for _ in range(rng.randint(1, 20)):
            t += rng.uniform(0.001, 0.05)
            chunks.append((t, rng.randint(1, 4)))
        records.append(make_record(str(i), start, chunks, slot=i % 8))
    a = summarize_level(records, concurrency=8)
    rng.shuffle(records)
    b = summarize_level(records, concurrency=8)
    assert a == b  # exact: fsum and sorting make order irrelevant


def test_quantiles_interpolate_linearly():
    vals = [1.0, 2.0, 3.0, 4.0]
    assert quantile(vals, 0.5) == 2.5
    assert quantile(vals, 0.0) == 1.0
    assert quantile(vals, 1.0) == 4.0
    d = distribution([3.0, 1.0, 2.0], scale=10)
    assert d["p50"] == 20.0
    assert d["mean"] == 20.0
    assert d["max"] == 30.0


def test_level_quantiles_and_comparison_bounds_share_one_quantile():
    # The level figures and the statistics' bootstrap bounds interpolate the same way because
    # they call the same function, not two copies kept in step.
    assert quantile is intervals.quantile


def test_empty_level_summarizes_without_errors():
    s = summarize_level([], concurrency=4)
    assert s["output_tok_s"] is None
    assert s["ttft_ms"]["count"] == 0
    assert s["steady"]["output_tok_s"] is None


def test_window_tokens_spread_each_chunk_over_its_gap():
    times, toks = [1.0, 2.0, 4.0], [1, 2, 4]
    assert window_tokens(times, toks, 0.0, 10.0) == pytest.approx(7)
    assert window_tokens(times, toks, 1.5, 3.0) == pytest.approx(1 + 2)  # half of 2, half of 4
    assert window_tokens(times, toks, 0.5, 1.0) == pytest.approx(1)  # the first chunk, at arrival


def test_steady_throughput_is_not_thrown_by_a_window_edge_inside_a_decode_burst():
    # 10 lock-step streams: every 1 s a decode step delivers 3 tokens to each, spread over 20 ms
    records = []
    for i in range(10):
        chunks = [(k + 0.002 * i, 3) for k in range(1, 21)]
        records.append(make_record(str(i), 0.0 + 0.001 * i, chunks, slot=i))
    s = summarize_level(records, concurrency=10)
    steady = s["steady"]
    # the window ends at the first finish, inside the last burst: arrivals miss most of it
    assert steady["arrived_tok_s"] < 0.97 * 30
    assert steady["output_tok_s"] == pytest.approx(30, rel=0.01)


def test_the_summary_has_exactly_the_keys_its_typed_shape_declares() -> None:
    # summary.LevelSummary is the one declaration of a level summary's shape: what
    # summarize_level builds must match it, key for key, with and without an SLO.
    from benchlib.loadgen.goodput import Slo
    from benchlib.loadgen.records import ClockAnchor
    from benchlib.loadgen.summary import Distribution, LevelSummary

    declared_always = set(LevelSummary.__required_keys__)
    chunks = [(0.1, 1), (0.106, 1), (0.112, 1)]
    plain = summarize_level([make_record("a", 0.0, chunks)], concurrency=1)
    assert set(plain) == declared_always
    with_all = summarize_level(
        [make_record("a", 0.0, chunks)],
        concurrency=1,
        anchor=ClockAnchor(t0_wall=1_000_000.0, t0_perf=0.0),
        slo=Slo(ttft_ms=500.0),
    )
    assert set(with_all) - declared_always == {"window_wall", "goodput"}
    assert {"window_wall", "goodput"} <= LevelSummary.__optional_keys__
    distributions = [name for name in plain if name.endswith("_ms") or name == "decode_tok_s"]
    assert len(distributions) == 10
    for name in distributions:
        assert set(plain[name]) == set(Distribution.__required_keys__), name  # type: ignore[literal-required]


def step_stream(
    rng: random.Random, step_s: float, per_step: int, jitter: float, steps: int = 200
) -> tuple[list[tuple[float, int]], list[float]]:
    """A request whose engine makes `per_step` tokens every `step_s` (+- `jitter` of it), sent
    as one event per token 20-50 us apart (llama-server) when per_step > 1, and the truth: each
    token's share of its step's time, the samples a token-level ITL is meant to estimate."""
    chunks: list[tuple[float, int]] = []
    truth: list[float] = []
    t = 0.05
    for i in range(steps):
        step = step_s * (1 + rng.uniform(-jitter, jitter))
        t += step
        if i:
            truth += [step / per_step] * per_step
        chunks += [(t + e * 30e-6 + rng.uniform(0, 20e-6), 1) for e in range(per_step)]
    return chunks, truth


@pytest.mark.parametrize("step_ms", [0.5, 1.0, 1.8, 2.2, 5.0, 30.0])
@pytest.mark.parametrize("per_step", [1, 3])
def test_token_itl_is_right_at_any_step_time(step_ms: float, per_step: int) -> None:
    # Steps shorter than the delivery threshold used to chain a request into one delivery: no
    # samples at 1.8 ms steps, a p99 about twice the truth at 2.2 +- 0.4 ms. The oracle is the
    # stream's own schedule.
    rng = random.Random(int(step_ms * 10) + per_step)
    for jitter in (0.0, 0.2):
        streams = [step_stream(rng, step_ms / 1e3, per_step, jitter) for _ in range(20)]
        records = [make_record(f"r{i}", 0.0, c) for i, (c, _) in enumerate(streams)]
        truth = sorted(x * 1e3 for _, tr in streams for x in tr)
        itl = summarize_level(records, concurrency=1)["itl_ms"]
        assert itl["mean"] == pytest.approx(sum(truth) / len(truth), rel=0.05)
        assert itl["p50"] == pytest.approx(quantile(truth, 0.5), rel=0.05)
        assert itl["p99"] == pytest.approx(quantile(truth, 0.99), rel=0.05)
