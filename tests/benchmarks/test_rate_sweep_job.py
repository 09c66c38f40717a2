"""A rate sweep through the real sweep job and load generator, against the simulator."""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import async_to_sync

from benchmarks import audit_levels
from benchmarks.sweeps import handler, selectors, services
from benchmarks.sweeps.models import SweepLevel, SweepState
from core.jobs import JobContext
from core.models import Job
from hosts.models import Host
from tests.benchmarks.conftest import Simulator, load


def test_a_rate_sweep_runs_one_open_loop_level_per_rate_under_its_cap(
    simulator: Simulator, transactional_db: Any, local_host: Host
) -> None:
    sweep = services.sweep_create(
        base_url=simulator.base_url, levels=[4],
        load=load(model=simulator.model, requests_per_level=8, max_tokens=4,
                  request_rate=[20, 40], burstiness=0.5),
    )  # fmt: skip
    assert sweep.job_id is not None
    job = Job.objects.get(pk=sweep.job_id)
    ctx = JobContext(job_id=job.pk, kind=job.kind, params=job.params, worker_id="test")

    async def run() -> handler.SweepRunResult:
        return await asyncio.wait_for(handler.run_sweep(ctx), 90)

    assert async_to_sync(run)()["state"] == SweepState.COMPLETED
    levels = list(SweepLevel.objects.filter(sweep=sweep).order_by("index"))
    assert [(lv.concurrency, lv.requests_ok) for lv in levels] == [(4, 8), (4, 8)]
    assert [lv.summary["mode"] for lv in levels] == ["rate", "rate"]
    assert [lv.summary["target_rate"] for lv in levels] == [20.0, 40.0]
    assert [lv.summary["burstiness"] for lv in levels] == [0.5, 0.5]
    sweep.refresh_from_db()
    assert selectors.sweep_progress(sweep=sweep, levels=levels)["level_count"] == 2
    assert audit_levels.audit_sweep(sweep=sweep).problems == []
