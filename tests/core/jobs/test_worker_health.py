"""The supervised worker: a failed iteration is logged and retried with back-off, the worker
says it is unhealthy (in memory and, when the database takes it, in its beat row) and recovers
by itself; the dashboard refuses new work while no healthy worker is alive."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone

from core.jobs import JobContext, job_enqueue, job_handler
from core.jobs.health import WorkerUnavailable, worker_beat, worker_health, worker_require
from core.jobs.worker import Worker, WorkerSettings
from core.models import Job, JobState, WorkerBeat

# Short timings, so each failure and recovery takes well under a second of back-off.
FAST = WorkerSettings(
    poll_interval=0.05,
    lease_seconds=3.0,
    heartbeat_interval=0.2,
    retry_interval=0.05,
    retry_max_interval=0.4,
)


@job_handler("test.health_echo")
async def _echo(ctx: JobContext) -> dict[str, Any]:
    return {"echo": ctx.params["value"]}


async def _until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await sync_to_async(check)()
        if value:
            return value
        assert asyncio.get_running_loop().time() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.05)


def _beat_row(worker_id: str) -> WorkerBeat | None:
    return WorkerBeat.objects.filter(worker_id=worker_id).first()


def _rename_job_table(old: str, new: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f'ALTER TABLE "{old}" RENAME TO "{new}"')


@pytest.mark.django_db(transaction=True)
async def test_a_failing_iteration_is_logged_retried_and_the_worker_recovers_by_itself(
    caplog: pytest.LogCaptureFixture, settings: Any
) -> None:
    settings.SPECDASH_WORKER_REQUIRED = True
    settings.SPECDASH_JOB_LEASE_S = FAST.lease_seconds
    caplog.set_level(logging.INFO, logger="core.jobs.worker")
    worker = Worker(worker_id="supervised", settings=FAST)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        await _until(lambda: _beat_row("supervised"), 10, "the first beat")
        # The queue's table gone: every claim and reap fails, the beat table still takes writes.
        await sync_to_async(_rename_job_table)("hosts_job", "hosts_job_away")
        try:
            row = await _until(
                lambda: (r := _beat_row("supervised")) is not None and not r.healthy and r, 10,
                "the unhealthy beat written",
            )  # fmt: skip
            assert "hosts_job" in row.error, row.error
            assert not worker.health.healthy and "hosts_job" in worker.health.error
            health = await sync_to_async(worker_health)()
            assert not health.ok and "hosts_job" in health.message
            with pytest.raises(WorkerUnavailable, match="unhealthy"):
                await sync_to_async(worker_require)(kind="server.run")
            await asyncio.sleep(1.0)  # several failed iterations, with back-off
            assert not task.done(), "the worker died of one database error"
            failures = worker._failures
            assert 3 <= failures <= 15, f"{failures} tries in 1 s: no back-off between them"
        finally:
            await sync_to_async(_rename_job_table)("hosts_job_away", "hosts_job")
        await _until(lambda: worker.health.healthy, 10, "the worker healthy again")
        row = await sync_to_async(_beat_row)("supervised")
        assert row is not None and row.healthy and row.error == ""
        await sync_to_async(worker_require)(kind="server.run")
        # And it runs jobs again.
        job = await sync_to_async(job_enqueue)(kind="test.health_echo", params={"value": 7})
        done = await _until(
            lambda: Job.objects.filter(pk=job.pk, state=JobState.SUCCEEDED).first(), 10,
            "a job queued after the recovery ran",
        )  # fmt: skip
        assert done.result == {"echo": 7}
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    messages = [r.getMessage() for r in caplog.records]
    assert any("its loop failed" in m and "hosts_job" in m for m in messages), messages
    assert any("recovered after" in m for m in messages), messages
    # A clean shutdown takes the worker out of the count at once.
    assert await sync_to_async(_beat_row)("supervised") is None


@pytest.mark.django_db(transaction=True)
async def test_a_worker_whose_writes_are_refused_goes_unhealthy_in_memory_and_recovers(
    short_busy_timeout: float,
) -> None:
    # Another connection holds SQLite's write lock: every write of the worker, its beat
    # included, waits out the busy timeout (made short here) and fails "database is locked".
    await sync_to_async(lambda: connection.close())()
    name = await sync_to_async(lambda: connection.settings_dict["NAME"])()
    worker = Worker(worker_id="locked-out", settings=FAST)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    holder = sqlite3.connect(name, timeout=10, isolation_level=None)
    try:
        await _until(lambda: _beat_row("locked-out"), 10, "the first beat")
        holder.execute("BEGIN EXCLUSIVE")
        try:
            await _until(lambda: not worker.health.healthy, 10, "the worker unhealthy")
            assert "locked" in worker.health.error, worker.health.error
            await asyncio.sleep(1.0)
            assert not task.done(), "the worker died of a locked database"
        finally:
            holder.execute("COMMIT")
        await _until(lambda: worker.health.healthy, 10, "the worker healthy again")
        row = await sync_to_async(_beat_row)("locked-out")
        assert row is not None and row.healthy
    finally:
        holder.close()
        stop.set()
        await asyncio.wait_for(task, 30)
        await sync_to_async(lambda: connection.close())()


@pytest.mark.django_db
def test_new_work_is_refused_without_an_alive_healthy_worker(settings: Any) -> None:
    settings.SPECDASH_WORKER_REQUIRED = True
    settings.SPECDASH_JOB_LEASE_S = 30.0
    with pytest.raises(WorkerUnavailable, match="No job worker has reported in the last 30 s"):
        worker_require(kind="server.run")
    # A worker silent for longer than a lease is not alive.
    worker_beat(worker_id="old")
    WorkerBeat.objects.update(beat_at=timezone.now() - timedelta(seconds=31))
    assert not worker_health().workers
    with pytest.raises(WorkerUnavailable):
        worker_require(kind="server.run")
    # An alive but unhealthy worker: refused, with its error.
    worker_beat(worker_id="sick", healthy=False, error="OperationalError: database or disk is full")
    with pytest.raises(WorkerUnavailable, match="database or disk is full"):
        worker_require(kind="server.run")
    # A healthy one that claims only other kinds is not enough either.
    worker_beat(worker_id="shards", kinds=("sweep.shard",))
    with pytest.raises(WorkerUnavailable, match=r"claims server\.run"):
        worker_require(kind="server.run")
    worker_require(kind="sweep.shard")
    worker_beat(worker_id="any")
    worker_require(kind="server.run")
    assert worker_health().ok


def test_the_retry_interval_is_validated() -> None:
    with pytest.raises(ValueError, match="retry interval"):
        WorkerSettings(retry_interval=2.0, retry_max_interval=1.0)
    with pytest.raises(ValueError, match="retry interval"):
        WorkerSettings(retry_interval=0.0)
