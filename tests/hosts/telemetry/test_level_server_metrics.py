"""Per-level server figures come from /metrics counter differences over exactly the level."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from benchlib.loadgen.recordstore import iter_rows
from benchlib.simulator.profiles import PROFILES
from benchmarks.sweeps import handler, services
from benchmarks.sweeps.models import SweepLevel, SweepState
from core.jobs import JobContext
from hosts.telemetry.engine_profiles import Engine
from hosts.telemetry.levels import (
    LevelServerMetrics,
    ServerMetrics,
    interval_opening,
    level_server_metrics,
)
from hosts.telemetry.prometheus import EngineMetrics, parse_engine_metrics
from tests.benchmarks.conftest import ROOT, Simulator, load, start_simulator

DATA = Path(__file__).parent / "data"


@pytest.fixture
def eagle3(tmp_path: Path) -> Iterator[Simulator]:
    # The eagle3 profile's accept length and draft depth, with cheaper steps so a short level
    # holds a few thousand verify rounds.
    sim = start_simulator(tmp_path, "--profile", "eagle3", "--t0-ms", "4", "--k-ms", "0.5")
    try:
        yield sim
    finally:
        sim.kill()


@pytest.mark.django_db(transaction=True)
async def test_eagle3_sweep_level_accept_length_matches_the_simulators_configured_mean(
    eagle3: Simulator, settings: Any, tmp_path: Path, local_host: Any
) -> None:
    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    sweep = await sync_to_async(services.sweep_create)(
        base_url=eagle3.base_url, levels=[4, 8],
        load=load(model=eagle3.model, requests_per_level=None, duration=2.0, max_tokens=256,
                  ignore_eos=True),
    )  # fmt: skip
    assert sweep.job_id is not None
    ctx = JobContext(
        job_id=sweep.job_id, kind="sweep.run", params={"sweep_id": sweep.pk}, worker_id="test"
    )
    result = await handler.run_sweep(ctx)
    assert result["state"] == SweepState.COMPLETED, result
    levels = [lv async for lv in SweepLevel.objects.filter(sweep=sweep).order_by("index")]
    configured = PROFILES["eagle3"].accept_length
    assert len(levels) == 2
    for level in levels:
        metrics = level.server_metrics
        assert metrics["available"] and metrics["accept_length_source"] == "verify_counters"
        assert metrics["spec_drafts"] > 300
        assert metrics["accept_length"] == pytest.approx(configured, rel=0.05)
        # The interval is the level's own: its duration, not the server's lifetime.
        assert metrics["duration_s"] == pytest.approx(level.summary["duration_s"], abs=1.0)
    # Two levels, two disjoint intervals: the second starts after the first ended.
    assert levels[1].server_metrics["started_at"] >= levels[0].server_metrics["ended_at"]


def _scrape(name: str, at: float) -> EngineMetrics:
    return parse_engine_metrics((DATA / name).read_text(), scraped_at=at)


async def test_a_level_is_measured_between_its_own_start_and_summary_scrapes() -> None:
    scrapes = iter([_scrape("sglang_scrape1.prom", 10.0), _scrape("sglang_scrape2.prom", 20.0)])
    saved: list[tuple[int, int, Any]] = []

    async def scrape() -> EngineMetrics:
        return next(scrapes)

    async def save(sweep_id: int, index: int, metrics: ServerMetrics) -> None:
        saved.append((sweep_id, index, metrics))

    marks = LevelServerMetrics(sweep_id=7, scrape=scrape, save=save)
    # level_start is before the warm-up: the interval opens at measure_start, after it
    await marks.observe({"event": "level_start", "level_index": 3, "concurrency": 4})
    await marks.observe({"event": "measure_start", "level_index": 3, "concurrency": 4})
    await marks.observe({"event": "sample", "level_index": 3})
    await marks.observe({"event": "level_summary", "level_index": 3, "summary": {}})  # type: ignore[typeddict-item]
    assert [(s, i) for s, i, _ in saved] == [(7, 3)]
    metrics = saved[0][2]
    # Worked out by hand from the two fixture files (scrape 2 minus scrape 1), not by the code
    # under test: generation_tokens_total 520000 - 400000, prompt_tokens_total 2.6e6 - 2e6,
    # num_requests_total (140 + 60) - (60 + 40), spec_verify_calls_total 8 ranks x (25995 -
    # 20000); SGLang's accept length is (generation tokens - requests) / verify calls; the
    # histograms' means are sum differences over count differences.
    assert metrics["available"] and metrics["engine"] == Engine.SGLANG
    assert (metrics["started_at"], metrics["ended_at"], metrics["duration_s"]) == (10.0, 20.0, 10.0)
    assert metrics["generation_tokens"] == 120_000
    assert metrics["prompt_tokens"] == 600_000
    assert metrics["requests"] == 100
    assert metrics["generation_tps"] == pytest.approx(120_000 / 10.0)
    assert metrics["spec_drafts"] == 8 * 5_995 == 47_960
    assert metrics["accept_length"] == pytest.approx((120_000 - 100) / 47_960)
    assert metrics["accept_length_source"] == "verify_counters"
    assert metrics["ttft_s"]["count"] == 100
    assert metrics["ttft_s"]["mean"] == pytest.approx((139.0 - 46.0) / 100)
    assert metrics["itl_s"]["count"] == 1_000
    assert metrics["itl_s"]["mean"] == pytest.approx((29.5 - 7.5) / 1_000)
    assert metrics["e2e_s"]["count"] == 100
    assert metrics["e2e_s"]["mean"] == pytest.approx((1_560.0 - 360.0) / 100)
    # e2e: all 100 requests of the interval fall in the (8, 16] bucket (le="8.0" stayed at 100,
    # le="16.0" went 100 -> 200): p50 and p90 interpolate to 8 + 8 x 0.5 and 8 + 8 x 0.9.
    assert metrics["e2e_s"]["p50"] == pytest.approx(12.0)
    assert metrics["e2e_s"]["p90"] == pytest.approx(15.2)
    assert metrics["reset"] is False
    assert (
        metrics["opened_after_warmup_s"],
        metrics["opened_before_start_at_s"],
        metrics["opened_before_first_request_s"],
        metrics["interval_order_ok"],
    ) == (None, None, None, None)


async def test_a_server_without_metrics_leaves_the_level_unavailable_with_the_reason() -> None:
    import httpx

    saved: list[ServerMetrics] = []

    async def scrape() -> EngineMetrics:
        raise httpx.ConnectError("connection refused")

    async def save(sweep_id: int, index: int, metrics: ServerMetrics) -> None:
        saved.append(metrics)

    marks = LevelServerMetrics(sweep_id=1, scrape=scrape, save=save)
    await marks.observe({"event": "measure_start", "level_index": 0})
    await marks.observe({"event": "level_summary", "level_index": 0})
    assert saved == [{"available": False, "reason": "/metrics: connection refused"}]


def level_records(path: Path) -> dict[int, list[dict[str, Any]]]:
    by_level: dict[int, list[dict[str, Any]]] = {}
    for record in iter_rows(path):
        by_level.setdefault(int(record["level"]), []).append(record)
    return by_level


@pytest.mark.django_db(transaction=True)
async def test_every_levels_server_interval_opens_before_its_first_request(
    tmp_path: Path, settings: Any, local_host: Any
) -> None:
    # vLLM style: prompt tokens are counted when a request is admitted, so a boundary scrape
    # taken after a level's opening burst misses that burst's prompts. Slow steps keep every
    # level's requests in flight long enough for a late scrape to miss them.
    sim = start_simulator(tmp_path, "--profile", "fast", "--metrics-style", "vllm",
                          "--t0-ms", "40", "--k-ms", "1")  # fmt: skip
    try:
        settings.SPECDASH_DATA_DIR = tmp_path / "data"
        sweep = await sync_to_async(services.sweep_create)(
            base_url=sim.base_url, levels=[1, 4, 8],
            load=load(model=sim.model, requests_per_level=8, max_tokens=6, input_tokens=16),
        )  # fmt: skip
        assert sweep.job_id is not None
        ctx = JobContext(
            job_id=sweep.job_id, kind="sweep.run", params={"sweep_id": sweep.pk}, worker_id="t"
        )
        result = await handler.run_sweep(ctx)
    finally:
        sim.kill()
    assert result["state"] == SweepState.COMPLETED, result
    records = level_records(
        Path(await sync_to_async(lambda: type(sweep).objects.get(pk=sweep.pk).records_path)())
    )
    levels = [lv async for lv in SweepLevel.objects.filter(sweep=sweep).order_by("index")]
    assert len(levels) == 3
    for level in levels:
        metrics = level.server_metrics
        sent = records[level.index]
        assert metrics["available"], metrics
        # Every level, not only the first: the counters' deltas are exactly what was sent.
        assert metrics["prompt_tokens"] == sum(r["prompt"] for r in sent), level.index
        assert metrics["generation_tokens"] == sum(r["out"] for r in sent), level.index
        assert metrics["ttft_s"]["count"] == len(sent)


def test_the_opening_is_checked_against_the_warm_up_the_common_start_and_the_first_request() -> (
    None
):
    summary = {"window_wall": [100.0, 110.0]}
    fine = interval_opening(99.5, summary=summary, start_at=99.75, warmed_at=99.0)
    assert fine == {
        "opened_after_warmup_s": 0.5,
        "opened_before_start_at_s": 0.25,
        "opened_before_first_request_s": 0.5,
        "interval_order_ok": True,
    }
    # a shard still warming up when the level opened: its warm-up is inside the interval
    late_warmup = interval_opening(99.5, summary=summary, start_at=99.75, warmed_at=99.6)
    assert late_warmup["interval_order_ok"] is False
    # a scrape that answered after the first request
    assert interval_opening(100.5, summary=summary)["interval_order_ok"] is False


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("max_streams", [64, 2], ids=["one-process", "split"])
async def test_warm_up_requests_are_outside_every_levels_server_interval(
    tmp_path: Path, settings: Any, max_streams: int, local_host: Any
) -> None:
    # The server's own counters over the level's interval against the client's measured
    # requests: with the interval opened before the warm-up, the server counted the warm-up's
    # requests and tokens too (6 + 8 requests where the client measured 8).
    sim = start_simulator(tmp_path, "--profile", "fast", "--metrics-style", "vllm")
    try:
        settings.SPECDASH_DATA_DIR = tmp_path / "data"
        settings.SPECDASH_LOADGEN_MAX_STREAMS = max_streams
        sweep = await sync_to_async(services.sweep_create)(
            base_url=sim.base_url, levels=[1, 4],
            load=load(model=sim.model, requests_per_level=8, max_tokens=16, input_tokens=16,
                      warmup_requests=6, ignore_eos=True),
        )  # fmt: skip
        assert sweep.job_id is not None
        ctx = JobContext(
            job_id=sweep.job_id, kind="sweep.run", params={"sweep_id": sweep.pk}, worker_id="t"
        )
        result = await handler.run_sweep(ctx)
    finally:
        sim.kill()
    assert result["state"] == SweepState.COMPLETED, result
    assert result.get("split", False) is (max_streams == 2)
    levels = [lv async for lv in SweepLevel.objects.filter(sweep=sweep).order_by("index")]
    assert len(levels) == 2
    for level in levels:
        metrics = level.server_metrics
        assert metrics["available"], metrics
        assert level.summary["requests"]["ok"] == 8
        assert level.summary["output_tokens"] == 8 * 16
        assert metrics["requests"] == 8, level.index
        assert metrics["generation_tokens"] == 8 * 16, level.index
        assert metrics["interval_order_ok"] is True, metrics
        assert metrics["opened_after_warmup_s"] >= 0
        assert metrics["opened_before_first_request_s"] >= 0
        if max_streams == 2 and level.concurrency == 4:
            assert metrics["opened_before_start_at_s"] >= 0


@pytest.mark.parametrize("processes", [1, 2])
def test_the_load_generators_opening_scrape_follows_the_warm_up_in_one_and_several_processes(
    tmp_path: Path, processes: int
) -> None:
    # The load generator on its own (--processes splits a level over worker processes): the
    # simulator's counters between measure_start and level_summary are the measured requests'.
    sim = start_simulator(tmp_path, "--profile", "fast", "--metrics-style", "vllm")
    try:
        events, records = tmp_path / "events.jsonl", tmp_path / "records.jsonl"
        argv = [sys.executable, "-m", "benchlib.loadgen", "--base-url", sim.base_url,
                "--model", sim.model, "--concurrency", "4", "--processes", str(processes),
                "--requests-per-level", "8", "--warmup-requests", "6", "--max-tokens", "16",
                "--input-tokens", "16", "--ignore-eos",
                "--boundary-metrics-url", sim.base_url + "/metrics",
                "--events", str(events), "--records", str(records), "--quiet"]  # fmt: skip
        # Under the test's 120 s, so a hung run fails here with its stderr.
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=100)
    finally:
        sim.kill()
    assert done.returncode == 0, done.stderr[-3000:]
    stream = [json.loads(line) for line in events.read_text().splitlines()]
    kinds = [e["event"] for e in stream]
    assert kinds.index("level_start") < kinds.index("measure_start") < kinds.index("level_summary")
    (opening,) = [e for e in stream if e["event"] == "measure_start"]
    (closing,) = [e for e in stream if e["event"] == "level_summary"]
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    warmup = [r for r in rows if r.get("warmup")]
    measured = [r for r in rows if not r.get("warmup")]
    assert len(warmup) == 6 and len(measured) == 8
    # Ordered by the clocks: every warm-up response before the scrape, the scrape before the
    # first measured request.
    assert max(r["end"] for r in warmup) <= opening["warmed_at"] <= opening["server_metrics_t"]
    assert opening["server_metrics_t"] <= min(r["start"] for r in measured)
    figures = level_server_metrics(
        parse_engine_metrics(
            opening["server_metrics_text"], scraped_at=opening["server_metrics_t"]
        ),
        parse_engine_metrics(
            closing["server_metrics_text"], scraped_at=closing["server_metrics_t"]
        ),
    )
    assert figures["requests"] == 8
    assert figures["generation_tokens"] == sum(r["out"] for r in measured) == 8 * 16
    assert figures["prompt_tokens"] == sum(r["prompt"] for r in measured)


def test_sglangs_tpot_histogram_fallback_is_labelled_per_request_not_per_token() -> None:
    # SGLang records time_per_output_token_seconds once per finished request (its TPOT); only
    # inter_token_latency_seconds is one sample per token. The names are the exposition's own.
    texts = [(DATA / f"sglang_scrape{i}.prom").read_text() for i in (1, 2)]
    token = level_server_metrics(
        *(parse_engine_metrics(t, scraped_at=i) for i, t in enumerate(texts))
    )
    assert (token["itl_unit"], token["itl_histogram"]) == (
        "token", "sglang:inter_token_latency_seconds"
    )  # fmt: skip
    renamed = [
        t.replace("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds")
        for t in texts
    ]
    tpot = level_server_metrics(
        *(parse_engine_metrics(t, scraped_at=i) for i, t in enumerate(renamed))
    )
    assert (tpot["itl_unit"], tpot["itl_histogram"]) == (
        "request_tpot", "sglang:time_per_output_token_seconds"
    )  # fmt: skip
    assert tpot["itl_s"] == token["itl_s"]  # the same samples, now said to be per request
