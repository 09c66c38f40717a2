"""An interrupted sweep can be resumed from its first unfinished level, or abandoned."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.test import Client

from benchlib.loadgen.recordstore import iter_rows
from benchmarks import audit_levels
from benchmarks.sweeps import handler, recording, services
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepState
from core.jobs import JobContext
from core.models import Job, JobState
from tests.benchmarks.conftest import Simulator, level_summary_event, load


@pytest.fixture(autouse=True)
def _loopback_is_a_registered_host(local_host: Any) -> None:
    """These sweeps target a simulator on this machine by URL: with the local host
    registered, loopback is a registered host's address (benchmarks/sweeps/targets.py)."""


def _interrupt_after_first_level(sweep: Sweep) -> None:
    """What a dead worker leaves behind: level 0 completed, level 1 partial, interrupted."""
    recording.sweep_begin(sweep_id=sweep.pk)
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=level_summary_event(0, 1)["summary"])
    recording.sweep_level_started(sweep_id=sweep.pk, index=1, concurrency=2, t=1.0)
    recording.sweep_finish(
        sweep_id=sweep.pk, state=SweepState.INTERRUPTED, reason="interrupted: worker gone"
    )


@pytest.mark.django_db(transaction=True)
async def test_resume_runs_only_the_unfinished_levels_and_keeps_the_completed_one(
    simulator: Simulator,
) -> None:
    sweep = await sync_to_async(services.sweep_create)(
        base_url=simulator.base_url, levels=[1, 2, 3],
        load=load(model=simulator.model, requests_per_level=12, max_tokens=4),
    )  # fmt: skip
    await sync_to_async(_interrupt_after_first_level)(sweep)
    first = await SweepLevel.objects.aget(sweep=sweep, index=0)

    resumed = await sync_to_async(services.sweep_resume)(sweep=sweep)
    assert resumed.state == SweepState.QUEUED
    assert "from level 2 (C=2)" in resumed.reason
    assert resumed.job_id is not None
    job = await Job.objects.aget(pk=resumed.job_id)
    assert (job.kind, job.params) == ("sweep.run", {"sweep_id": sweep.pk, "resume_from": 1})

    ctx = JobContext(job_id=job.pk, kind=job.kind, params=job.params, worker_id="test")
    result = await asyncio.wait_for(handler.run_sweep(ctx), 90)
    assert result["state"] == SweepState.COMPLETED
    levels = {lv.index: lv async for lv in SweepLevel.objects.filter(sweep=sweep)}
    assert sorted(levels) == [0, 1, 2]
    assert [levels[i].concurrency for i in range(3)] == [1, 2, 3]
    assert all(lv.state == LevelState.COMPLETED for lv in levels.values())
    assert levels[1].requests_ok == 12 and levels[2].requests_ok == 12
    # The level measured before the interruption is untouched.
    assert (levels[0].finished_at, levels[0].output_tok_s) == (
        first.finished_at,
        first.output_tok_s,
    )


@pytest.mark.django_db
def test_abandon_closes_an_interrupted_sweep_and_keeps_its_levels(ready_instance: Any) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1, 2], load=load())
    _interrupt_after_first_level(sweep)
    abandoned = services.sweep_abandon(sweep=sweep)
    assert abandoned.state == SweepState.CANCELLED
    assert abandoned.reason == "abandoned by the system after: interrupted: worker gone"
    states = dict(SweepLevel.objects.filter(sweep=sweep).values_list("index", "state"))
    assert states == {0: LevelState.COMPLETED, 1: LevelState.PARTIAL}
    with pytest.raises(ValidationError):
        services.sweep_resume(sweep=abandoned)


@pytest.mark.django_db
def test_only_an_interrupted_sweep_can_be_resumed_and_only_on_a_ready_server(
    ready_instance: Any,
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1, 2], load=load())
    with pytest.raises(ValidationError, match="only an interrupted sweep"):
        services.sweep_resume(sweep=sweep)
    _interrupt_after_first_level(sweep)
    ready_instance.state = "crashed"
    ready_instance.save(update_fields=["state"])
    sweep.refresh_from_db()
    with pytest.raises(ValidationError, match="not ready"):
        services.sweep_resume(sweep=sweep)
    assert Job.objects.filter(kind="sweep.run", state=JobState.QUEUED).count() == 1  # the original


@pytest.mark.django_db
def test_viewers_cannot_resume_or_abandon_operators_can(
    client: Client, viewer: Any, operator: Any, ready_instance: Any
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1, 2], load=load())
    _interrupt_after_first_level(sweep)
    client.force_login(viewer)
    assert client.post(f"/sweeps/{sweep.pk}/resume/").status_code == 403
    assert client.post(f"/sweeps/{sweep.pk}/abandon/").status_code == 403
    client.force_login(operator)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert 'data-testid="resume-sweep"' in page and 'data-testid="abandon-sweep"' in page
    assert client.post(f"/sweeps/{sweep.pk}/resume/").status_code == 302
    sweep.refresh_from_db()
    assert sweep.state == SweepState.QUEUED


async def _wait_for(condition: Any, *, seconds: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


@pytest.mark.django_db(transaction=True)
async def test_resuming_a_sweep_cut_mid_level_keeps_every_earlier_record(
    slow_simulator: Simulator,
) -> None:
    """The reported loss: a resume rewrote records.jsonl with only the resumed level, all
    labelled level 0, and left the resumed levels without server figures."""
    sweep = await sync_to_async(services.sweep_create)(
        base_url=slow_simulator.base_url, levels=[1, 2, 3],
        load=load(model=slow_simulator.model, requests_per_level=6, max_tokens=48),
    )  # fmt: skip
    assert sweep.job_id is not None
    job = await Job.objects.aget(pk=sweep.job_id)
    ctx = JobContext(job_id=job.pk, kind=job.kind, params=job.params, worker_id="test")
    first_run = asyncio.create_task(handler.run_sweep(ctx))

    async def level_1_running() -> bool:
        return await SweepLevel.objects.filter(
            sweep=sweep, index=1, state=LevelState.RUNNING
        ).aexists()

    await _wait_for(level_1_running)
    first_run.cancel()  # what a worker shutting down does to its jobs
    with pytest.raises(asyncio.CancelledError):
        await first_run
    await sync_to_async(handler.sweep_on_interrupted)(job.pk, job.params)
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.state == SweepState.INTERRUPTED
    records = Path(sweep.records_path)
    before = await asyncio.to_thread(records.read_bytes)
    cut = await SweepLevel.objects.aget(sweep=sweep, index=1)
    assert cut.state == LevelState.PARTIAL

    resumed = await sync_to_async(services.sweep_resume)(sweep=sweep)
    assert resumed.job_id is not None
    job = await Job.objects.aget(pk=resumed.job_id)
    ctx = JobContext(job_id=job.pk, kind=job.kind, params=job.params, worker_id="test")
    result = await asyncio.wait_for(handler.run_sweep(ctx), 120)
    assert result["state"] == SweepState.COMPLETED

    after = await asyncio.to_thread(records.read_bytes)
    assert after.startswith(before), "the resume rewrote what the first run had written"
    lines = await asyncio.to_thread(lambda: list(iter_rows(records)))
    counts = collections.Counter((r["level"], r["attempt"]) for r in lines if not r.get("warmup"))
    levels = {lv.index: lv async for lv in SweepLevel.objects.filter(sweep=sweep)}
    assert [levels[i].attempt for i in range(3)] == [1, 2, 2]
    for index, level in levels.items():
        assert level.state == LevelState.COMPLETED
        assert counts[(index, level.attempt)] == level.requests_ok == 6
        # Server figures for every level, the resumed ones included.
        assert level.server_metrics.get("available") is True, level.server_metrics
        assert level.server_metrics["generation_tokens"] > 0
    # The cut level's first attempt is kept beside the new one, never merged into it.
    assert [e["attempt"] for e in levels[1].earlier_attempts] == [1]
    assert levels[1].earlier_attempts[0]["state"] == LevelState.PARTIAL
    assert sum(n for (index, attempt), n in counts.items() if attempt == 1 and index == 1) == (
        levels[1].earlier_attempts[0]["requests_ok"]
        + levels[1].earlier_attempts[0]["requests_failed"]
    )
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.attempts == 2
    report = await sync_to_async(audit_levels.audit_sweep)(sweep=sweep)
    assert report.problems == [] and report.levels_checked == 3


@pytest.mark.django_db(transaction=True)
async def test_a_sweep_resumed_on_a_replacement_server_sends_the_model_discovered_before(
    simulator: Simulator, make_ready_instance: Any
) -> None:
    # A profile without a served name: the sweep asks the server for its model. Resumed on a
    # replacement server (the restart-and-resume case), it used to send "default", which the
    # server refuses (404) on every request.
    import httpx

    async with httpx.AsyncClient(timeout=10) as client:
        served = (await client.get(simulator.base_url + "/v1/models")).json()["data"][0]["id"]
    first = await sync_to_async(make_ready_instance)(port=simulator.port, served_model_name="")
    sweep = await sync_to_async(services.sweep_create)(
        instance=first, levels=[1, 2], load=load(requests_per_level=4, max_tokens=4)
    )
    assert sweep.environment["target"]["model"] == "" and sweep.job_id is not None
    job = await Job.objects.aget(pk=sweep.job_id)
    ctx = JobContext(job_id=job.pk, kind=job.kind, params=job.params, worker_id="test")
    assert (await asyncio.wait_for(handler.run_sweep(ctx), 90))["state"] == SweepState.COMPLETED
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.environment["target"]["model"] == served  # kept with the sweep

    # Level 1 cut by the server's death; the replacement is up.
    await SweepLevel.objects.filter(sweep=sweep, index=1).aupdate(state=LevelState.PARTIAL)
    await Sweep.objects.filter(pk=sweep.pk).aupdate(state=SweepState.INTERRUPTED)
    first.state = "crashed"
    await first.asave(update_fields=["state"])
    replacement = await sync_to_async(make_ready_instance)(
        port=simulator.port, served_model_name=""
    )
    resumed = await sync_to_async(services.sweep_resume)(sweep=sweep, instance=replacement)
    assert resumed.environment["target"]["model"] == served and resumed.job_id is not None
    job = await Job.objects.aget(pk=resumed.job_id)
    ctx = JobContext(job_id=job.pk, kind=job.kind, params=job.params, worker_id="test")
    assert (await asyncio.wait_for(handler.run_sweep(ctx), 90))["state"] == SweepState.COMPLETED
    level = await SweepLevel.objects.aget(sweep=sweep, index=1)
    assert (level.requests_ok, level.requests_failed) == (4, 0)
