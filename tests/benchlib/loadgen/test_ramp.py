"""A rate ramp within one level: the rate rises as vLLM's ramp-up strategies say, the level's
arrivals follow it, and the figures per time slice come from the records alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchlib.loadgen import cli
from benchlib.loadgen.cli_args import build_parser
from benchlib.loadgen.events import EventWriter
from benchlib.loadgen.ramp import ramp_rate, slice_figures
from benchlib.loadgen.settings import LoadSettings, LoadSettingsError
from tests.benchlib.loadgen.conftest import make_record
from tests.benchlib.loadgen.stub_server import StubServer


def test_linear_and_exponential_ramps_run_from_the_start_rate_to_the_end_rate() -> None:
    assert [ramp_rate("linear", 2.0, 10.0, p) for p in (0.0, 0.5, 1.0)] == [2.0, 6.0, 10.0]
    assert [ramp_rate("exponential", 1.0, 16.0, p) for p in (0.0, 0.5, 1.0)] == [1.0, 4.0, 16.0]
    assert ramp_rate("linear", 2.0, 10.0, 1.5) == 10.0  # clamped at the end rate
    with pytest.raises(ValueError, match="unknown ramp"):
        ramp_rate("step", 1.0, 2.0, 0.5)


def test_slices_count_arrivals_tokens_and_ttft_per_slice() -> None:
    records = [
        make_record("a", 0.0, [(0.1, 2), (0.5, 3)]),
        make_record("b", 0.4, [(0.6, 4)]),
        make_record("c", 1.0, [(1.3, 1)]),
        make_record("d", 2.0, [], error_kind="http"),
    ]
    rows = slice_figures(records, slices=2, start_rate=1.0, end_rate=3.0, strategy="linear")
    assert [(r["t0_s"], r["t1_s"]) for r in rows] == [(0.0, 1.0), (1.0, 2.0)]
    assert [r["arrivals"] for r in rows] == [2, 2]  # the last start belongs to the last slice
    assert [r["ok"] for r in rows] == [2, 1]
    assert [r["output_tok_s"] for r in rows] == [9.0, 1.0]  # tokens delivered in each slice
    assert rows[0]["ttft_p50_ms"] == pytest.approx(150.0)
    assert rows[1]["ttft_p99_ms"] == pytest.approx(300.0)
    # TPOT: a's 4 gaps over 0.4 s (100 ms), b's one chunk (0 ms); c's single token has none.
    assert rows[0]["tpot_p50_ms"] == pytest.approx(50.0)
    assert rows[1]["tpot_p50_ms"] is None
    assert [r["offered_rate"] for r in rows] == [1.5, 2.5]


def test_a_ramp_needs_its_start_rate_and_a_request_rate() -> None:
    with pytest.raises(LoadSettingsError) as info:
        LoadSettings.clean({"requests_per_level": 5, "ramp": "linear", "request_rate": 4.0})
    assert "start rate" in " ".join(info.value.errors["ramp_start_rate"])
    with pytest.raises(LoadSettingsError):
        LoadSettings.clean({"requests_per_level": 5, "ramp": "sawtooth", "request_rate": 4.0})


async def test_a_ramped_level_sends_faster_as_it_goes_and_reports_its_slices(
    tmp_path: Path, stub: StubServer
) -> None:
    out = tmp_path / "out.json"
    args = build_parser().parse_args(
        ["--base-url", stub.base_url, "--concurrency", "64", "--request-rate", "200",
         "--ramp", "linear", "--ramp-start-rate", "20", "--ramp-slices", "4",
         "--requests-per-level", "120", "--max-tokens", "2", "--output", str(out), "--quiet"]
    )  # fmt: skip
    assert await cli.run(args, EventWriter(None), None) == cli.EXIT_OK
    level = json.loads(out.read_text())["levels"][0]
    ramp = level["ramp"]
    assert (ramp["strategy"], ramp["start_rate"], ramp["end_rate"]) == ("linear", 20.0, 200.0)
    rows = ramp["slices"]
    assert len(rows) == 4 and sum(r["arrivals"] for r in rows) == 120
    # Equal slices of time: a rising rate puts more arrivals in each later slice.
    arrivals = [r["arrivals"] for r in rows]
    assert arrivals[0] < arrivals[-1]
    assert rows[0]["arrival_rate"] < rows[-1]["arrival_rate"]
    # 120 arrivals ramped linearly from 20/s to 200/s take about 120 ln(10) / 180 = 1.5 s; at a
    # steady 200/s they would take 0.6 s
    assert level["duration_s"] > 0.8
