"""Case 12 with the real parts: a server that crashes after it was ready, while a sweep runs
against it. The load generator gives up on the dead server (connection errors in a row)
about when the lifecycle's watch marks the crash; the sweep must name the crash, and a
level finished with requests lost to the dead server must not count as completed."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from benchmarks.sweeps import handler
from benchmarks.sweeps import services as sweeps
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepState
from core.jobs import JobContext
from hosts.models import InstanceState
from tests.fixtures.procs import alive
from tests.hosts.lifecycle.conftest import gpu_used_mb, marker_pids, start, wait_state

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_crash_mid_sweep_is_named_and_its_level_is_partial_not_completed(
    jobs: Any, sim_profile: Any, sim_state: Path, tmp_path: Path, settings: Any
) -> None:
    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    profile = await sync_to_async(sim_profile)(
        "--crash-after-requests", "30", "--fault-orphan-workers"
    )
    before = gpu_used_mb(sim_state)
    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=90)
    assert ready.state == InstanceState.READY, ready.reason

    sweep = await sync_to_async(sweeps.sweep_create)(
        instance=ready, levels=[1, 2, 5],
        load={"api": "completions", "requests_per_level": 20, "max_tokens": 4,
              "input_tokens": 8, "warmup_requests": 0},
    )  # fmt: skip
    assert sweep.job_id is not None
    ctx = JobContext(
        job_id=sweep.job_id, kind="sweep.run", params={"sweep_id": sweep.pk}, worker_id="test"
    )
    await asyncio.wait_for(handler.run_sweep(ctx), 120)

    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.state == SweepState.FAILED
    assert sweep.reason.startswith("server crashed mid-sweep: crashed"), sweep.reason
    levels = {lv.index: lv async for lv in SweepLevel.objects.filter(sweep_id=sweep.pk)}
    assert levels[0].state == LevelState.COMPLETED and levels[0].requests_failed == 0
    # Every level that lost requests to the dead server is out of the comparisons.
    cut = [lv for lv in levels.values() if lv.requests_failed]
    assert cut, "the crash should have cost requests"
    assert all(lv.state != LevelState.COMPLETED for lv in cut), [
        (lv.concurrency, lv.state, lv.requests_ok, lv.requests_failed) for lv in cut
    ]
    # The level the crash cut: partial when the load generator finished it, failed when it
    # gave up on the dead server first (which of the two depends on where the crash lands).
    assert levels[1].state in (LevelState.PARTIAL, LevelState.FAILED)
    assert levels[1].requests_ok > 0 and levels[1].requests_failed > 0
    assert levels[1].reason.startswith("server crashed during this level"), levels[1].reason

    # The lifecycle side: crashed, its orphaned workers cleaned up, GPUs back.
    assert (await asyncio.wait_for(owner, 90))["outcome"] == "crashed"
    crashed = await wait_state(instance.pk, InstanceState.CRASHED, InstanceState.DIRTY)
    assert crashed.state == InstanceState.CRASHED, (crashed.reason, crashed.evidence)
    assert not [p for p in marker_pids(crashed.run_id) if alive(p)]
    assert gpu_used_mb(sim_state) == before
