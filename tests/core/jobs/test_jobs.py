from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone

from core.jobs import (
    JobContext,
    LeaseLost,
    job_cancel,
    job_enqueue,
    job_handler,
    on_cancel_forced,
    on_interrupted,
    store,
)
from core.jobs.execution import CANCELLED_REASON, FORCED_REASON
from core.jobs.fence import job_finish, job_publish
from core.jobs.queue import claim_next_job, reap_expired_jobs, renew_leases
from core.jobs.worker import Worker, WorkerSettings
from core.models import Job, JobHook, JobState

ROOT = Path(__file__).resolve().parents[3]
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


@job_handler("test.db_refused")
async def _db_refused(ctx: JobContext) -> dict[str, Any]:
    from django.db import OperationalError

    raise OperationalError("database is locked")


db_refused_hooks: list[int] = []


@on_interrupted("test.db_refused")
def _db_refused_interrupted(job_id: int, params: dict[str, Any]) -> None:
    db_refused_hooks.append(job_id)


@pytest.mark.django_db(transaction=True)
async def test_a_job_cut_by_the_database_refusing_writes_is_interrupted_with_its_hook_not_failed() -> (
    None
):
    # A server's run cut by a locked database must be adopted (its hook), or a live server is
    # left with no owner and a Stop issued meanwhile is never carried out.
    job = await sync_to_async(job_enqueue)(kind="test.db_refused")

    def done() -> bool:
        # Ended and its hook run: the end is written before the hook runs, and a worker told
        # to stop in between would leave the hook to a reaper.
        return not Job.objects.filter(pk=job.pk, hook_owed__gt="").exists() and not (
            Job.objects.filter(state__in=[JobState.QUEUED, JobState.RUNNING]).exists()
        )

    await _run_worker_until(done)
    job = await Job.objects.aget(pk=job.pk)
    assert job.state == JobState.INTERRUPTED, (job.state, job.error)
    assert job.error.startswith("the database refused the job's writes: database is locked")
    assert job.hook_owed == "" and db_refused_hooks == [job.pk]


@pytest.mark.django_db(transaction=True)
async def test_a_lease_renewal_after_the_end_is_written_does_not_cancel_the_owed_hook(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Between the job's end (written, hook owed) and its hook, the heartbeat renews the leases
    # of the jobs still in hand; the ended job's row matches no running row then, which must not
    # read as "reaped by another worker" and cancel the hook (seen: the worker stopped with the
    # hook still owed; a reaper runs an owed hook later, so only the worker's word shows it).
    real_hook = store.arun_owed_hook

    async def hook_after_a_heartbeat(job_id: int) -> None:
        await asyncio.sleep(0.6)  # three heartbeats of _run_worker_until's worker
        await real_hook(job_id)

    real_finish = store.ajob_finish

    async def finish_returning_after_a_heartbeat(**kwargs: Any) -> bool:
        # The end is committed, and its await resumes only after a renewal has found no
        # running row (the order seen on a loaded machine): still not a reap.
        recorded = await real_finish(**kwargs)
        await asyncio.sleep(0.6)
        return recorded

    monkeypatch.setattr(store, "arun_owed_hook", hook_after_a_heartbeat)
    monkeypatch.setattr(store, "ajob_finish", finish_returning_after_a_heartbeat)
    db_refused_hooks.clear()
    job = await sync_to_async(job_enqueue)(kind="test.db_refused")

    def done() -> bool:
        return not Job.objects.filter(pk=job.pk, hook_owed__gt="").exists() and not (
            Job.objects.filter(state__in=[JobState.QUEUED, JobState.RUNNING]).exists()
        )

    await _run_worker_until(done)
    job = await Job.objects.aget(pk=job.pk)
    assert job.state == JobState.INTERRUPTED, (job.state, job.error)
    assert job.hook_owed == "" and db_refused_hooks == [job.pk]
    assert "lost by worker" not in caplog.text


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


# --- fencing, outcomes, owed hooks ------------------------------------------------------

forced_calls: list[int] = []
stubborn_saw_cancel: list[int] = []


@job_handler("test.stubborn")
async def _stubborn(ctx: JobContext) -> dict[str, Any]:
    """Ignores its cancel: only an outright task cancel ends it."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        stubborn_saw_cancel.append(ctx.job_id)
        raise
    return {}


@on_interrupted("test.stubborn")
def _stubborn_interrupted(job_id: int, params: dict[str, Any]) -> None:
    interrupted_calls.append(job_id)


@on_cancel_forced("test.stubborn")
def _stubborn_forced(job_id: int, params: dict[str, Any]) -> None:
    forced_calls.append(job_id)


async def _drive(worker: Worker, predicate: Any, timeout: float = 20) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        async with asyncio.timeout(timeout):
            while not await sync_to_async(predicate)():
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task


def _fast_worker(**kw: Any) -> Worker:
    return Worker(
        worker_id="test-worker",
        settings=WorkerSettings(poll_interval=0.05, heartbeat_interval=0.2, **kw),
    )


@pytest.mark.django_db(transaction=True)
async def test_a_cancel_within_the_grace_ends_cancelled_saying_so() -> None:
    job = await sync_to_async(job_enqueue)(kind="test.wait_for_cancel")

    def running_then_cancel() -> bool:
        current = Job.objects.get(pk=job.pk)
        if current.state == JobState.RUNNING and not current.cancel_requested:
            job_cancel(job=current)
        return current.is_finished

    await _drive(_fast_worker(), running_then_cancel)
    job = await Job.objects.aget(pk=job.pk)
    assert (job.state, job.error, job.hook_owed) == (JobState.CANCELLED, CANCELLED_REASON, "")
    assert job.result == {"cleaned_up": True}
    assert job.pk not in interrupted_calls


@pytest.mark.django_db(transaction=True)
async def test_a_cancel_that_overruns_the_grace_ends_cancelled_forced_with_the_kinds_clean_up() -> (
    None
):
    job = await sync_to_async(job_enqueue)(kind="test.stubborn")

    def running_then_cancel() -> bool:
        current = Job.objects.get(pk=job.pk)
        if current.state == JobState.RUNNING and not current.cancel_requested:
            job_cancel(job=current)
        # The forced clean-up is owed in the UPDATE that ends the job and paid right after it:
        # wait for the payment too, or the worker may be stopped in between (a stop that, by
        # design, leaves the debt to the next poll of any worker).
        return current.is_finished and not current.hook_owed

    await _drive(_fast_worker(cancel_grace=0.3), running_then_cancel)
    job = await Job.objects.aget(pk=job.pk)
    assert (job.state, job.error) == (JobState.CANCELLED, FORCED_REASON)
    assert "did not stop within the grace; forced" in job.error
    assert job.hook_owed == ""  # the clean-up ran, and the debt is paid
    assert stubborn_saw_cancel.count(job.pk) == 1
    assert forced_calls.count(job.pk) == 1
    # A cancel is not a dead worker: the interrupt hook (adoption, for a server) is not run.
    assert job.pk not in interrupted_calls


@pytest.mark.django_db(transaction=True)
async def test_worker_shutdown_is_interrupted_not_cancelled() -> None:
    job = await sync_to_async(job_enqueue)(kind="test.stubborn")
    await _drive(_fast_worker(), lambda: Job.objects.get(pk=job.pk).state == JobState.RUNNING)
    job = await Job.objects.aget(pk=job.pk)
    assert (job.state, job.error) == (JobState.INTERRUPTED, "worker shut down")
    assert job.pk in interrupted_calls and job.pk not in forced_calls


@pytest.mark.django_db(transaction=True)
async def test_a_reaped_job_is_dropped_by_its_worker_and_never_overwritten() -> None:
    job = await sync_to_async(job_enqueue)(kind="test.wait_for_cancel")
    worker = _fast_worker(lease_seconds=30)
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    try:
        async with asyncio.timeout(20):
            while (await Job.objects.aget(pk=job.pk)).state != JobState.RUNNING:
                await asyncio.sleep(0.05)
        # Another worker reaps it (as after a stall of this one past its lease): the reap's
        # own UPDATE, with its hook owed.
        reaped = await Job.objects.filter(pk=job.pk, state=JobState.RUNNING).aupdate(
            state=JobState.INTERRUPTED,
            error="worker test-worker stopped renewing its lease",
            finished_at=timezone.now(),
            hook_owed=JobHook.INTERRUPTED,
        )
        assert reaped == 1
        # This worker's next renewal matches no row: it stops the job's task at once; its
        # next poll pays the owed hook.
        async with asyncio.timeout(20):
            while worker.running_job_ids or (await Job.objects.aget(pk=job.pk)).hook_owed:
                await asyncio.sleep(0.05)
    finally:
        stop.set()
        await task
    job = await Job.objects.aget(pk=job.pk)
    assert job.state == JobState.INTERRUPTED and "test-worker stopped renewing" in job.error
    assert job.result == {}  # the handler's "cleaned_up" was never written over it
    # The owed hook was paid once (by a worker's poll), not again when the task was dropped.
    assert interrupted_calls.count(job.pk) == 1 and job.hook_owed == ""


@pytest.mark.django_db
def test_writes_about_a_job_are_fenced_by_its_worker_and_state() -> None:
    job = job_enqueue(kind="test.echo", params={"value": 1})
    assert claim_next_job(worker_id="w1", lease_seconds=30) is not None
    assert not job_publish(job_id=job.pk, worker_id="w2", result={"x": 1})
    assert not job_finish(job_id=job.pk, worker_id="w2", state=JobState.SUCCEEDED)
    assert job_publish(job_id=job.pk, worker_id="w1", result={"x": 1})
    Job.objects.filter(pk=job.pk).update(state=JobState.INTERRUPTED, error="reaped")
    assert not job_finish(job_id=job.pk, worker_id="w1", state=JobState.SUCCEEDED)
    assert renew_leases(worker_id="w1", job_ids=[job.pk], lease_seconds=30) == [job.pk]
    job.refresh_from_db()
    assert (job.state, job.error, job.result) == (JobState.INTERRUPTED, "reaped", {"x": 1})


async def test_a_context_past_its_lease_deadline_refuses_to_act() -> None:
    ctx = JobContext(job_id=1, kind="k", params={}, worker_id="w", lease_deadline=0.0)
    with pytest.raises(LeaseLost, match="lease expired"):
        ctx.check_lease()
    with pytest.raises(LeaseLost):
        await ctx.publish({"events": []})  # refused before any query


# The reaper, as its own process: it reaps, its hook starts writing, and the process is
# SIGKILLed before the hook's transaction commits.
KILLED_REAPER = """
import os, signal, django
django.setup()
from core.jobs import job_enqueue, on_interrupted
from core.jobs.queue import reap_expired_jobs

@on_interrupted("test.owed")
def hook(job_id, params):
    job_enqueue(kind="test.hook_effect", params={"for": job_id})
    os.kill(os.getpid(), signal.SIGKILL)

reap_expired_jobs()
"""


@on_interrupted("test.owed")
def _owed_hook(job_id: int, params: dict[str, Any]) -> None:
    # Idempotent, as hooks must be: the debt may be paid again after a crash before commit.
    if not Job.objects.filter(kind="test.hook_effect", params__for=job_id).exists():
        job_enqueue(kind="test.hook_effect", params={"for": job_id})


@pytest.mark.django_db(transaction=True)
def test_a_reaper_killed_between_the_reap_and_its_hook_leaves_the_hook_owed_and_another_pays_it() -> (
    None
):
    job = job_enqueue(kind="test.owed")
    assert claim_next_job(worker_id="dead-worker", lease_seconds=30) is not None
    Job.objects.filter(pk=job.pk).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "specdash.settings",
        "SPECDASH_DATABASE_URL": f"sqlite:///{connection.settings_dict['NAME']}",
    }
    connection.close()  # the file is shared with the reaper process
    reaper = subprocess.run(
        [sys.executable, "-c", KILLED_REAPER], env=env, capture_output=True, timeout=120
    )
    assert reaper.returncode == -signal.SIGKILL, reaper.stderr.decode()[-2000:]
    job.refresh_from_db()
    # The reap committed with its debt; the hook's own write died with the process.
    assert (job.state, job.hook_owed) == (JobState.INTERRUPTED, JobHook.INTERRUPTED)
    assert not Job.objects.filter(kind="test.hook_effect").exists()

    # Any worker's next poll pays it, once.
    assert reap_expired_jobs() == []
    assert reap_expired_jobs() == []
    job.refresh_from_db()
    assert job.hook_owed == ""
    effects = list(Job.objects.filter(kind="test.hook_effect"))
    assert [e.params for e in effects] == [{"for": job.pk}]


# --- placement ---------------------------------------------------------------------------


def test_worker_kinds_tags_and_machine_come_from_the_settings_and_flags_override(
    settings: Any,
) -> None:
    settings.SPECDASH_JOB_KINDS = ["sweep.shard", " sweep.run"]
    settings.SPECDASH_JOB_TAGS = ["b", "a", ""]
    settings.SPECDASH_JOB_MACHINE = "load-1"
    conf = WorkerSettings.from_settings()
    assert (conf.kinds, conf.tags, conf.machine) == (
        ("sweep.run", "sweep.shard"),
        ("a", "b"),
        "load-1",
    )
    flags = WorkerSettings.from_settings(kinds="server.run", tags=None, machine="gpu-2")
    assert (flags.kinds, flags.tags, flags.machine) == (("server.run",), ("a", "b"), "gpu-2")
    settings.SPECDASH_JOB_KINDS = []
    assert WorkerSettings.from_settings().kinds == ()


def test_the_declared_job_settings_default_to_the_worker_defaults() -> None:
    assert WorkerSettings.from_settings() == WorkerSettings()


def test_a_short_lease_setting_alone_brings_the_heartbeat_down_to_a_third(settings: Any) -> None:
    settings.SPECDASH_JOB_LEASE_S = 3.0
    settings.SPECDASH_JOB_HEARTBEAT_S = None
    assert WorkerSettings.from_settings().heartbeat_interval == 1.0
    assert WorkerSettings.from_settings(lease_seconds=60.0).heartbeat_interval == 5.0
    settings.SPECDASH_JOB_HEARTBEAT_S = 0.5
    assert WorkerSettings.from_settings().heartbeat_interval == 0.5


def test_the_job_settings_come_from_the_environment_when_the_process_starts() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "specdash.settings",
           "SPECDASH_JOB_KINDS": "sweep.shard, sweep.run", "SPECDASH_JOB_TAGS": "b,a,",
           "SPECDASH_JOB_MACHINE": "load-1", "SPECDASH_JOB_LEASE_S": "3"}  # fmt: skip
    code = (
        "import django; django.setup()\n"
        "from core.jobs.worker import WorkerSettings\n"
        "s = WorkerSettings.from_settings()\n"
        "print(s.kinds, s.tags, s.machine, s.lease_seconds, s.heartbeat_interval)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "('sweep.run', 'sweep.shard') ('a', 'b') load-1 3.0 1.0"
    bad = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={**env, "SPECDASH_JOB_LEASE_S": "soon"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode != 0 and "SPECDASH_JOB_LEASE_S='soon' is not a number" in bad.stderr


@pytest.mark.django_db
def test_a_worker_claims_only_its_kinds_and_tagged_jobs_only_with_the_tag() -> None:
    tagged = job_enqueue(kind="test.echo", params={"value": 1}, tag="gpu-box")
    other_kind = job_enqueue(kind="test.boom")
    assert claim_next_job(worker_id="w", lease_seconds=30, kinds=("test.echo",)) is None
    picked = claim_next_job(
        worker_id="w", lease_seconds=30, kinds=("test.echo",), tags=("gpu-box",)
    )
    assert picked is not None and picked.pk == tagged.pk
    untagged = claim_next_job(worker_id="w", lease_seconds=30, tags=("gpu-box",))
    assert untagged is not None and untagged.pk == other_kind.pk


@pytest.mark.django_db
def test_jobs_sharing_a_spread_key_never_run_together_on_one_machine() -> None:
    first = job_enqueue(kind="test.echo", params={"value": 1}, spread_key="level:1")
    second = job_enqueue(kind="test.echo", params={"value": 2}, spread_key="level:1")
    a = claim_next_job(worker_id="w1", lease_seconds=30, machine="m1")
    assert a is not None and (a.pk, a.machine) == (first.pk, "m1")
    # Another worker on the same machine: the partial unique index refuses the claim.
    assert claim_next_job(worker_id="w2", lease_seconds=30, machine="m1") is None
    b = claim_next_job(worker_id="w3", lease_seconds=30, machine="m2")
    assert b is not None and (b.pk, b.machine) == (second.pk, "m2")
