"""Per-level server figures come from /metrics counter differences over exactly the level."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from benchlib.simulator.profiles import PROFILES
from benchmarks import services
from benchmarks.models import SweepLevel, SweepState
from benchmarks.sweeps import handler
from core.jobs import JobContext
from hosts.telemetry.engine_profiles import Engine
from hosts.telemetry.levels import LevelServerMetrics
from hosts.telemetry.prometheus import EngineMetrics, parse_engine_metrics
from tests.benchmarks.conftest import Simulator, load, start_simulator

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
    saved: list[tuple[int, int, dict[str, Any]]] = []

    async def scrape() -> EngineMetrics:
        return next(scrapes)

    async def save(sweep_id: int, index: int, metrics: dict[str, Any]) -> None:
        saved.append((sweep_id, index, metrics))

    marks = LevelServerMetrics(sweep_id=7, scrape=scrape, save=save)
    await marks.observe({"event": "level_start", "level_index": 3, "concurrency": 4})
    await marks.observe({"event": "sample", "level_index": 3})
    await marks.observe({"event": "level_summary", "level_index": 3, "summary": {}})
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


async def test_a_server_without_metrics_leaves_the_level_unavailable_with_the_reason() -> None:
    import httpx

    saved: list[dict[str, Any]] = []

    async def scrape() -> EngineMetrics:
        raise httpx.ConnectError("connection refused")

    async def save(sweep_id: int, index: int, metrics: dict[str, Any]) -> None:
        saved.append(metrics)

    marks = LevelServerMetrics(sweep_id=1, scrape=scrape, save=save)
    await marks.observe({"event": "level_start", "level_index": 0})
    await marks.observe({"event": "level_summary", "level_index": 0})
    assert saved == [{"available": False, "reason": "/metrics: connection refused"}]


def level_records(path: Path) -> dict[int, list[dict[str, Any]]]:
    by_level: dict[int, list[dict[str, Any]]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
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
