from __future__ import annotations

import math
import random

import pytest

from benchlib.loadgen.goodput import Slo, level_goodput, request_figures, request_meets
from benchlib.loadgen.metrics import summarize_level
from benchlib.loadgen.records import RequestRecord
from tests.benchlib.loadgen.conftest import make_record

# Hand-built requests (times in seconds from 0, so every difference is exact in binary floating
# point: 0.25, 0.5, 0.125 ...).
# r1: TTFT 250 ms, 5 tokens at 125 ms gaps -> TPOT 125 ms, ITL 125 ms, E2E 750 ms
R1 = make_record("r1", 0.0, [(0.25, 1), (0.375, 1), (0.5, 1), (0.625, 1), (0.75, 1)])
# r2: TTFT 500 ms, then one chunk of 4 tokens after 500 ms -> TPOT 125 ms, ITL 125 ms, E2E 1 s
R2 = make_record("r2", 0.0, [(0.5, 1), (1.0, 4)])
# r3: TTFT 125 ms, 2 tokens, gap 1 s -> TPOT 1000 ms, E2E 1125 ms
R3 = make_record("r3", 0.0, [(0.125, 1), (1.125, 1)])
FAILED = make_record("r4", 0.0, [(0.125, 1)], end=0.25, error_kind="http_500")


def test_request_figures_of_a_hand_built_request() -> None:
    assert request_figures(R1) == {
        "ttft_ms": 250.0,
        "tpot_ms": 125.0,
        "itl_ms": 125.0,
        "max_gap_ms": 125.0,
        "e2e_ms": 750.0,
    }
    # the 4-token chunk's gap spread over its tokens; its longest gap is the chunk's whole gap
    assert request_figures(R2)["itl_ms"] == 125.0
    assert request_figures(R2)["max_gap_ms"] == 500.0


def test_a_limit_met_exactly_at_the_boundary_counts_as_met() -> None:
    assert request_meets(R1, Slo(ttft_ms=250.0, tpot_ms=125.0, itl_ms=125.0, e2e_ms=750.0))
    assert not request_meets(R1, Slo(ttft_ms=249.999))
    assert not request_meets(R1, Slo(e2e_ms=749.99))


def test_a_failed_request_is_a_miss_even_when_its_timings_would_pass() -> None:
    slo = Slo(ttft_ms=10_000.0)
    assert not request_meets(FAILED, slo)
    assert all(math.isinf(v) for v in request_figures(FAILED).values())


def test_level_goodput_counts_requests_and_tokens_that_met_the_slo() -> None:
    records = [R1, R2, R3, FAILED]
    slo = Slo(ttft_ms=500.0, tpot_ms=125.0, scope="request", attainment=0.5)
    got = level_goodput(records, slo, duration=2.0)
    # r1 (boundary TPOT) and r2 (boundary TTFT) meet it; r3 misses TPOT; the failure is a miss.
    assert got["requests"] == 4
    assert got["met"] == 2
    assert got["share"] == 0.5
    assert got["goodput_req_s"] == 1.0
    assert got["goodput_tok_s"] == (5 + 5) / 2.0
    assert got["meets_slo"] is True  # 50% met, attainment 50%
    stricter = level_goodput(
        records, Slo(ttft_ms=500.0, tpot_ms=125.0, scope="request"), duration=2
    )
    assert stricter["meets_slo"] is False


def test_p99_scope_fails_a_level_whose_failures_exceed_one_percent() -> None:
    fine = [make_record(f"a{i}", 0.0, [(0.125, 1), (0.25, 1)]) for i in range(99)]
    slo = Slo(ttft_ms=125.0)
    assert level_goodput(fine, slo, duration=1.0)["meets_slo"] is True
    # one failure in a hundred moves the p99 past every limit (failed = infinitely slow)
    got = level_goodput([*fine, FAILED, FAILED], slo, duration=1.0)
    assert got["meets_slo"] is False
    assert got["p99_failed"]["ttft_ms"] is True
    assert got["met"] == 99


def test_summary_carries_goodput_only_with_an_slo() -> None:
    assert "goodput" not in summarize_level([R1, R2], concurrency=2)
    summary = summarize_level([R1, R2, FAILED], concurrency=2, slo=Slo(e2e_ms=750.0))
    assert summary["goodput"]["met"] == 1
    assert summary["goodput"]["goodput_tok_s"] == pytest.approx(5 / summary["duration_s"])


def test_slo_from_its_json_form_refuses_bad_limits() -> None:
    assert Slo.from_dict({}) is None
    assert Slo.from_dict({"scope": "p99"}) is None
    assert Slo.from_dict({"ttft_ms": 1000, "tpot_ms": 50}) == Slo(ttft_ms=1000.0, tpot_ms=50.0)
    with pytest.raises(ValueError, match="positive"):
        Slo.from_dict({"ttft_ms": -1})
    with pytest.raises(ValueError, match="scope"):
        Slo.from_dict({"ttft_ms": 5, "scope": "p50"})


def stepped(rid: str, steps: list[tuple[float, int]], *, events_per_token: bool) -> RequestRecord:
    """A request whose engine steps end at the given (seconds after the previous step, tokens)
    marks: one event per step, or (llama-server) one event per token, 30 us apart."""
    chunks: list[tuple[float, int]] = []
    t = 0.1  # TTFT
    for gap, n in steps:
        t += gap
        if events_per_token:
            chunks += [(t + i * 30e-6, 1) for i in range(n)]
        else:
            chunks.append((t, n))
    return make_record(rid, 0.0, chunks)


def mean_token_gap_ms(steps: list[tuple[float, int]]) -> float:
    """The oracle: the time from the first step to the last over the tokens after the first
    step (the schedule's own figure, not the code's)."""
    return math.fsum(g for g, _ in steps[1:]) / sum(n for _, n in steps[1:]) * 1e3


def test_itl_limit_is_the_requests_mean_gap_per_delivery_not_its_worst_event_gap() -> None:
    # llama-server-like: 30 ms verify steps of 3 tokens, each token its own event. The summary's
    # token ITL reads 10 ms; a request meets "ITL <= 20 ms" (its mean gap is 10 ms).
    steps = [(0.03, 3)] * 20
    records = [stepped(f"l{i}", steps, events_per_token=True) for i in range(10)]
    summary = summarize_level(records, concurrency=1, slo=Slo(itl_ms=20.0, scope="request"))
    assert summary["itl_ms"]["p99"] == pytest.approx(10.0, rel=0.01)
    assert request_figures(records[0])["itl_ms"] == pytest.approx(mean_token_gap_ms(steps))
    assert summary["goodput"]["met"] == 10
    assert summary["goodput"]["meets_slo"] is True


def test_a_speculative_arm_meets_an_itl_limit_its_mean_gap_meets_and_fails_a_worst_gap_limit() -> (
    None
):
    # EAGLE-like: 12 ms verify steps of 1-4 tokens (mean token gap ~4.8 ms); a baseline at one
    # token every 8 ms. Under "ITL <= 10 ms" both meet it on every request; under "longest gap
    # <= 10 ms" only the baseline does: the worst gap is its own limit, under its own name.
    rng = random.Random(30)
    eagle_steps = [[(0.012, rng.randint(1, 4)) for _ in range(40)] for _ in range(50)]
    eagle = [stepped(f"e{i}", s, events_per_token=False) for i, s in enumerate(eagle_steps)]
    base = [stepped(f"b{i}", [(0.008, 1)] * 100, events_per_token=False) for i in range(50)]
    for i, rec in enumerate(eagle):
        assert request_figures(rec)["itl_ms"] == pytest.approx(mean_token_gap_ms(eagle_steps[i]))
        assert request_figures(rec)["max_gap_ms"] == pytest.approx(12.0)
    mean_itl = Slo(itl_ms=10.0, scope="request")
    worst_gap = Slo(max_gap_ms=10.0, scope="request")
    assert level_goodput(eagle, mean_itl, duration=1.0)["met"] == 50
    assert level_goodput(base, mean_itl, duration=1.0)["met"] == 50
    assert level_goodput(eagle, worst_gap, duration=1.0)["met"] == 0
    assert level_goodput(base, worst_gap, duration=1.0)["met"] == 50
    # p99 scope: the level's p99 over requests of each one's mean gap
    got = level_goodput(eagle, Slo(itl_ms=10.0), duration=1.0)
    assert got["meets_slo"] is True
    oracle = sorted(mean_token_gap_ms(s) for s in eagle_steps)
    assert got["p99"]["itl_ms"] == pytest.approx(oracle[-1], rel=0.02)  # p99 of 50: near the max


@pytest.mark.parametrize("scope", ["p99", "request"])
def test_timed_out_requests_fail_an_itl_only_slo(scope: str) -> None:
    # 10% of the requests timed out after a few fast tokens: they meet no SLO, so a level whose
    # every successful request is fast does not meet an ITL-only one.
    fine = [stepped(f"f{i}", [(0.005, 1)] * 100, events_per_token=False) for i in range(90)]
    timed_out = [
        make_record(f"t{i}", 0.0, [(0.1, 1), (0.105, 1), (0.11, 1)], end=30.0, error_kind="timeout")
        for i in range(10)
    ]
    slo = Slo(itl_ms=10.0, scope=scope)
    assert level_goodput(fine, slo, duration=1.0)["meets_slo"] is True
    got = level_goodput([*fine, *timed_out], slo, duration=1.0)
    assert got["met"] == 90 and got["share"] == 0.9
    assert got["meets_slo"] is False
    assert all(not request_meets(r, slo) for r in timed_out)
