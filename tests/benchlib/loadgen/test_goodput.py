from __future__ import annotations

import math

import pytest

from benchlib.loadgen.goodput import Slo, level_goodput, request_figures, request_meets
from benchlib.loadgen.metrics import summarize_level
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
        "e2e_ms": 750.0,
    }
    assert request_figures(R2)["itl_ms"] == 125.0  # the 4-token chunk's gap spread over its tokens


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
