from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone

from hosts.jobs import JobContext, job_cancel, job_enqueue, job_handler, on_interrupted
from hosts.jobs.worker import Worker, WorkerSettings, claim_next_job, reap_expired_jobs
from hosts.models import Job, JobState

interrupted_calls: list[int] = []


@job_handler("test.echo")
async def _echo(ctx: JobContext) -> dict[str, Any]:
    return {"echo": ctx.params["value"]}


@job_handler("test.wait_for_cancel")
async def _wait(ctx: JobContext) -> dict[str, Any]:
    await ctx.cancelled.wait()
    return {"cleaned_up": True}


@job_handler("test.boom")
async def _boom(ctx: JobContext) -> dict[str, Any]:
    raise RuntimeError("handler exploded")


@on_interrupted("test.wait_for_cancel")
def _interrupted(job_id: int, params: dict[str, Any]) -> None:
    interrupted_calls.append(job_id)


@pytest.mark.django_db
def test_a_job_is_claimed_by_exactly_one_worker() -> None:
    job = job_enqueue(kind="test.echo", params={"value": 1})
    first = claim_next_job(worker_id="w1", lease_seconds=30)
    second = claim_next_job(worker_id="w2", lease_seconds=30)
    assert first is not None and first.pk == job.pk and first.worker_id == "w1"
    assert second is None


@pytest.mark.django_db(transaction=True)
def test_concurrent_claims_from_threads_never_double_claim() -> None:
    jobs = [job_enqueue(kind="test.echo", params={"value": i}) for i in range(20)]
    claimed: list[tuple[str, int]] = []
    lock = threading.Lock()

    def work(worker_id: str) -> None:
        while (job := claim_next_job(worker_id=worker_id, lease_seconds=30)) is not None:
            with lock:
                claimed.append((worker_id, job.pk))
        connection.close()

    threads = [threading.Thread(target=work, args=(f"w{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    claimed_ids = [pk for _, pk in claimed]
    assert sorted(claimed_ids) == sorted(j.pk for j in jobs)


@pytest.mark.django_db
def test_jobs_sharing_a_lock_key_never_run_together() -> None:
    job_enqueue(kind="test.echo", params={"value": 1}, lock_key="instance:7")
    job_enqueue(kind="test.echo", params={"value": 2}, lock_key="instance:7")
    other = job_enqueue(kind="test.echo", params={"value": 3}, lock_key="instance:8")
    first = claim_next_job(worker_id="w1", lease_seconds=30)
    second = claim_next_job(worker_id="w2", lease_seconds=30)
    assert first is not None and second is not None
    assert second.pk == other.pk
    assert claim_next_job(worker_id="w3", lease_seconds=30) is None


@pytest.mark.django_db
def test_an_expired_lease_marks_the_job_interrupted_and_tells_its_domain() -> None:
    job = job_enqueue(kind="test.wait_for_cancel")
    claimed = claim_next_job(worker_id="dead-worker", lease_seconds=30)
    assert claimed is not None
    Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    assert reap_expired_jobs() == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.INTERRUPTED
    assert "dead-worker" in job.error
    assert job.pk in interrupted_calls


@pytest.mark.django_db
def test_cancelling_a_queued_job_is_immediate() -> None:
    job = job_cancel(job=job_enqueue(kind="test.echo", params={"value": 1}))
    assert job.state == JobState.CANCELLED
    assert claim_next_job(worker_id="w", lease_seconds=30) is None


async def _run_worker_until(predicate: Any, timeout: float = 20) -> None:
    worker = Worker(
        worker_id="test-worker", settings=WorkerSettings(poll_interval=0.05, heartbeat_interval=0.2)
    )
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        async with asyncio.timeout(timeout):
            while not await sync_to_async(predicate)():
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task


@pytest.mark.django_db(transaction=True)
async def test_worker_runs_jobs_and_records_results_and_failures() -> None:
    ok = await sync_to_async(job_enqueue)(kind="test.echo", params={"value": 42})
    bad = await sync_to_async(job_enqueue)(kind="test.boom")
    unknown = await sync_to_async(job_enqueue)(kind="test.no_such_kind")

    def all_done() -> bool:
        return not Job.objects.filter(state__in=[JobState.QUEUED, JobState.RUNNING]).exists()

    await _run_worker_until(all_done)
    ok, bad, unknown = [await Job.objects.aget(pk=j.pk) for j in (ok, bad, unknown)]
    assert (ok.state, ok.result) == (JobState.SUCCEEDED, {"echo": 42})
    assert bad.state == JobState.FAILED and "handler exploded" in bad.error
    assert unknown.state == JobState.FAILED and "no handler" in unknown.error


@pytest.mark.django_db(transaction=True)
async def test_a_running_job_sees_its_cancel_and_finishes_cancelled() -> None:
    job = await sync_to_async(job_enqueue)(kind="test.wait_for_cancel")

    def running_then_cancel() -> bool:
        current = Job.objects.get(pk=job.pk)
        if current.state == JobState.RUNNING and not current.cancel_requested:
            job_cancel(job=current)
        return current.state == JobState.CANCELLED

    await _run_worker_until(running_then_cancel)
    job = await Job.objects.aget(pk=job.pk)
    assert job.result == {"cleaned_up": True}


@pytest.mark.django_db(transaction=True)
async def test_worker_shutdown_marks_its_running_jobs_interrupted() -> None:
    job = await sync_to_async(job_enqueue)(kind="test.wait_for_cancel")

    def running() -> bool:
        return Job.objects.get(pk=job.pk).state == JobState.RUNNING

    await _run_worker_until(running)
    job = await Job.objects.aget(pk=job.pk)
    assert job.state == JobState.INTERRUPTED
    assert job.pk in interrupted_calls
