"""Retention (benchmarks/retention.py): what goes, what stays, and the worker running it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from benchmarks.sweeps.models import Sweep, SweepSample, SweepState
from benchmarks.sweeps.retention import retention_run
from benchmarks.sweeps.shards import EVENT, RECORD, SHARD_JOB_KIND
from core.jobs import registry
from core.jobs.worker import PERIODIC_FIRST_DELAY_S, Worker, WorkerSettings
from core.models import Job, JobEvent, JobState
from hosts.models import ServerProfile

pytestmark = pytest.mark.django_db


def _job(kind: str, *, state: str = JobState.SUCCEEDED, finished_ago: timedelta | None) -> Job:
    finished = None if finished_ago is None else timezone.now() - finished_ago
    job = Job.objects.create(kind=kind, state=state, finished_at=finished)
    JobEvent.objects.bulk_create(
        [JobEvent(job=job, seq=i + 1, kind=RECORD if i % 2 else EVENT, payload={"i": i})
         for i in range(6)]
    )  # fmt: skip
    return job


def _events(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).order_by("seq").values_list("kind", flat=True))


def test_old_jobs_lose_their_events_and_finished_shards_their_per_request_rows() -> None:
    old = _job("server.start", finished_ago=timedelta(days=15))
    recent = _job("server.start", finished_ago=timedelta(days=1))
    running = _job("sweep.run", state=JobState.RUNNING, finished_ago=None)
    shard_done = _job(SHARD_JOB_KIND, finished_ago=timedelta(hours=2))
    shard_just_done = _job(SHARD_JOB_KIND, finished_ago=timedelta(minutes=10))
    report = retention_run()
    assert _events(old) == []
    assert _events(recent) == _events(running) == _events(shard_just_done) == [
        EVENT, RECORD, EVENT, RECORD, EVENT, RECORD,
    ]  # fmt: skip
    assert _events(shard_done) == [EVENT, EVENT, EVENT]  # what its reader streamed is kept
    assert (report.job_events, report.shard_records) == (6, 3)
    assert Job.objects.filter(pk=old.pk).exists()  # the job itself stays


def _sweep(make_profile: Callable[..., ServerProfile], *, finished_ago: timedelta) -> Sweep:
    sweep = Sweep.objects.create(
        profile=make_profile(),
        levels=[1, 2],
        state=SweepState.COMPLETED,
        finished_at=timezone.now() - finished_ago,
    )
    # Two levels, a sample every second for a minute each.
    SweepSample.objects.bulk_create(
        [SweepSample(sweep=sweep, level_index=level, t=1000.0 + 100 * level + s, data={})
         for level in (0, 1) for s in range(60)]
    )  # fmt: skip
    return sweep


def _times(sweep: Sweep) -> list[tuple[int, float]]:
    return list(
        SweepSample.objects.filter(sweep=sweep).order_by("level_index", "t")
        .values_list("level_index", "t")
    )  # fmt: skip


def test_old_sweeps_samples_are_thinned_to_one_per_step_per_level(
    make_profile: Callable[..., ServerProfile],
) -> None:
    old = _sweep(make_profile, finished_ago=timedelta(days=31))
    recent = _sweep(make_profile, finished_ago=timedelta(days=2))
    ancient = _sweep(make_profile, finished_ago=timedelta(days=60))
    report = retention_run()
    assert _times(old) == [(lv, 1000.0 + 100 * lv + s) for lv in (0, 1) for s in range(0, 60, 10)]
    assert len(_times(recent)) == 120
    # Past the worker's scan window: only a full scan reaches it.
    assert len(_times(ancient)) == 120
    assert (report.samples, report.sweeps_thinned) == (108, 1)
    out = StringIO()
    call_command("retention", "--all", stdout=out)
    assert len(_times(ancient)) == 12
    assert "108 samples of 1 sweeps" in out.getvalue()
    assert retention_run(all_sweeps=True).samples == 0  # idempotent


async def test_the_worker_runs_a_periodic_task_in_its_own_thread_once_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []
    done = threading.Event()

    def task() -> None:
        ran.append(threading.current_thread().name)
        done.set()

    monkeypatch.setattr(registry, "_periodic", {})
    registry.periodic_task("test.task", interval_s=lambda: 30.0)(task)
    worker = Worker(worker_id="w-periodic", settings=WorkerSettings(poll_interval=0.1))
    worker._start_due_periodic(0.0)
    worker._start_due_periodic(PERIODIC_FIRST_DELAY_S - 1)
    assert ran == []  # not during the worker's first minute
    worker._start_due_periodic(PERIODIC_FIRST_DELAY_S)
    await asyncio.to_thread(done.wait, 10)
    assert len(ran) == 1 and ran[0] != threading.current_thread().name
    await asyncio.sleep(0.05)
    worker._start_due_periodic(PERIODIC_FIRST_DELAY_S + 29)
    assert len(ran) == 1  # next at its interval
