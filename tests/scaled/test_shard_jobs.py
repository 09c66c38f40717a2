"""Shards of a split level as jobs: claimed by another worker (another machine in a real
deployment), reported through the job rows, merged exactly into one level."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from benchlib.loadgen.recordstore import iter_rows
from benchmarks.sweeps import services
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepState
from core.jobs.worker import Worker, WorkerSettings
from core.models import Job, JobState
from tests.benchmarks.conftest import Simulator, load, start_simulator
from tests.scaled.test_distributed import fast_simulator  # noqa: F401  (fixture)


async def _until(check: Any, timeout: float = 60) -> None:
    async with asyncio.timeout(timeout):
        while not await sync_to_async(check)():
            await asyncio.sleep(0.1)


@pytest.mark.django_db(transaction=True)
async def test_shard_jobs_run_on_another_worker_and_merge_into_one_level(
    fast_simulator: Simulator,  # noqa: F811
    settings: Any,
    tmp_path: Path,
    local_host: Any,  # loopback is then a registered host's address
) -> None:
    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    settings.SPECDASH_LOADGEN_MAX_STREAMS = 2
    settings.SPECDASH_LOADGEN_SHARD_JOBS = True
    sweep = await sync_to_async(services.sweep_create)(
        base_url=fast_simulator.base_url,
        levels=[4],
        load=load(model=fast_simulator.model, requests_per_level=24, max_tokens=8),
    )
    stop = asyncio.Event()
    # The coordinator's worker has room for the sweep job only: every shard must be claimed
    # by the other worker, as a worker on another machine would.
    coordinator = Worker(
        worker_id="machine-a", settings=WorkerSettings(max_jobs=1, poll_interval=0.1)
    )
    helper = Worker(worker_id="machine-b", settings=WorkerSettings(max_jobs=4, poll_interval=0.1))
    tasks = [asyncio.create_task(coordinator.run(stop))]
    await _until(lambda: Job.objects.filter(kind="sweep.run", state=JobState.RUNNING).exists())
    tasks.append(asyncio.create_task(helper.run(stop)))
    try:
        await _until(lambda: Sweep.objects.get(pk=sweep.pk).is_finished, timeout=90)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert (sweep.state, sweep.reason) == (SweepState.COMPLETED, "")
    shard_jobs = [j async for j in Job.objects.filter(kind="sweep.shard").order_by("pk")]
    assert [(j.state, j.worker_id) for j in shard_jobs] == [(JobState.SUCCEEDED, "machine-b")] * 2
    level = await SweepLevel.objects.aget(sweep=sweep, index=0)
    assert level.state == LevelState.COMPLETED
    split = level.summary["split"]["shards"]
    assert [(s["concurrency"], s["worker"]) for s in split] == [(2, "machine-b"), (2, "machine-b")]
    # One summary over both shards' requests, every one of the 24 accounted for.
    assert level.requests_ok == 24 == sum(s["requests_ok"] for s in split)
    assert len(level.summary["split"]["shards"]) == 2 and level.summary["processes"] == 2
    records = await asyncio.to_thread(lambda: list(iter_rows(Path(sweep.records_path))))
    assert len(records) == 24


@pytest.mark.django_db(transaction=True)
async def test_gang_started_shards_warm_up_before_their_common_start_outside_the_interval(
    settings: Any,
    tmp_path: Path,
    local_host: Any,  # loopback is then a registered host's address
) -> None:
    # Each shard warms up, then says it is ready; the gang's start (and the level's opening
    # scrape, just before it) comes after every shard's warm-up. The server's own counters over
    # the level are the measured requests' only.
    # 40 ms steps: each shard's warm-up (3 rounds of 16 tokens) takes about 2 s, longer than
    # the 1 s between a gang's start being given and the start itself.
    sim = start_simulator(tmp_path, "--profile", "fast", "--metrics-style", "vllm",
                          "--t0-ms", "40", "--k-ms", "1")  # fmt: skip
    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    settings.SPECDASH_LOADGEN_MAX_STREAMS = 2
    settings.SPECDASH_LOADGEN_SHARD_JOBS = True
    stop = asyncio.Event()
    try:
        sweep = await sync_to_async(services.sweep_create)(
            base_url=sim.base_url,
            levels=[4],
            load=load(model=sim.model, requests_per_level=8, max_tokens=16, warmup_requests=6,
                      ignore_eos=True),
        )  # fmt: skip
        coordinator = Worker(
            worker_id="machine-a", settings=WorkerSettings(max_jobs=1, poll_interval=0.1)
        )
        helper = Worker(
            worker_id="machine-b", settings=WorkerSettings(max_jobs=4, poll_interval=0.1)
        )
        tasks = [asyncio.create_task(coordinator.run(stop))]
        await _until(lambda: Job.objects.filter(kind="sweep.run", state=JobState.RUNNING).exists())
        tasks.append(asyncio.create_task(helper.run(stop)))
        try:
            await _until(lambda: Sweep.objects.get(pk=sweep.pk).is_finished, timeout=120)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
    finally:
        sim.kill()
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert (sweep.state, sweep.reason) == (SweepState.COMPLETED, "")
    level = await SweepLevel.objects.aget(sweep=sweep, index=0)
    assert level.summary["processes"] == 2 and level.requests_ok == 8
    metrics = level.server_metrics
    assert metrics["available"], metrics
    assert metrics["requests"] == 8
    assert metrics["generation_tokens"] == 8 * 16
    assert metrics["interval_order_ok"] is True, metrics
    assert metrics["opened_after_warmup_s"] >= 0 and metrics["opened_before_start_at_s"] >= 0
