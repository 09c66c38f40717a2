"""Cancelling a server.run job: within the grace its own verified stop ends it `cancelled`;
past the grace (a server that ignores SIGTERM, so the stop outlasts the grace) the task is
cancelled outright, the job says "did not stop within the grace; forced", and the kind's
clean-up, a server.stop, stops the server and verifies it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from core.jobs import job_cancel
from core.jobs.execution import CANCELLED_REASON, FORCED_REASON
from core.jobs.worker import Worker, WorkerSettings
from core.models import Job, JobState
from hosts.models import InstanceState, ServerInstance
from tests.fixtures.procs import alive
from tests.hosts.lifecycle.conftest import start, wait_state

# 300 s: each test waits for the server's start, its stop and the job's end, each bounded at
# 120 s, and a wait must be able to fail with its own message before pytest-timeout kills the test.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]


@pytest.fixture
async def worker() -> AsyncIterator[Callable[[float], None]]:
    running: list[tuple[asyncio.Event, asyncio.Task[None]]] = []

    def launch(cancel_grace: float) -> None:
        stop = asyncio.Event()
        settings = WorkerSettings(poll_interval=0.1, cancel_grace=cancel_grace)
        running.append((stop, asyncio.create_task(Worker("w", settings).run(stop))))

    yield launch
    for stop, task in running:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 60)


async def _cancel_owner(instance_id: int) -> Job:
    owner = await Job.objects.aget(kind="server.run", params__instance_id=instance_id)
    await sync_to_async(job_cancel)(job=owner)
    return owner


async def _jobs(instance_id: int) -> list[Job]:
    return [j async for j in Job.objects.filter(params__instance_id=instance_id).order_by("pk")]


async def _finished(job_id: int) -> Job:
    async with asyncio.timeout(120):
        while not (job := await Job.objects.aget(pk=job_id)).is_finished:
            await asyncio.sleep(0.1)
    return job


async def test_a_cancel_within_the_grace_stops_the_server_and_ends_cancelled(
    worker: Any, sim_profile: Any
) -> None:
    profile = await sync_to_async(sim_profile)()
    instance = await start(profile)
    worker(60.0)
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=120)
    assert ready.state == InstanceState.READY, ready.reason
    owner = await _cancel_owner(instance.pk)
    stopped = await wait_state(instance.pk, InstanceState.STOPPED, InstanceState.DIRTY, timeout=120)
    assert stopped.state == InstanceState.STOPPED, (stopped.reason, stopped.evidence)
    owner = await _finished(owner.pk)
    assert (owner.state, owner.error) == (JobState.CANCELLED, CANCELLED_REASON)
    assert [j.kind for j in await _jobs(instance.pk)] == ["server.run"]
    assert ready.pid is not None and not alive(ready.pid)


async def test_a_cancel_past_the_grace_is_forced_then_cleaned_up_by_a_verified_stop(
    worker: Any, sim_profile: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # TERM is ignored, so the owner's own stop waits the whole TERM-to-KILL grace (3 s):
    # longer than the job's cancel grace (0.5 s).
    monkeypatch.setenv("SPECDASH_STOP_GRACE_S", "3")
    profile = await sync_to_async(sim_profile)("--fault-ignore-sigterm")
    instance = await start(profile)
    worker(0.5)
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=120)
    assert ready.state == InstanceState.READY, ready.reason
    owner = await _cancel_owner(instance.pk)
    owner = await _finished(owner.pk)
    assert (owner.state, owner.error) == (JobState.CANCELLED, FORCED_REASON)
    assert "did not stop within the grace; forced" in owner.error
    stopped = await wait_state(instance.pk, InstanceState.STOPPED, InstanceState.DIRTY, timeout=120)
    assert stopped.state == InstanceState.STOPPED, (stopped.reason, stopped.evidence)
    jobs = await _jobs(instance.pk)
    assert [(j.kind, j.state) for j in jobs] == [
        ("server.run", JobState.CANCELLED),
        ("server.stop", JobState.SUCCEEDED),
    ]
    assert jobs[1].result == {"outcome": "stopped"}
    # Verified: the server and its workers are gone; the record says why it was stopped.
    assert ready.pid is not None and not alive(ready.pid)
    messages = [m async for m in stopped.events.values_list("message", flat=True)]
    assert any("did not stop within the grace; forced" in m for m in messages), messages
    instance_now = await ServerInstance.objects.aget(pk=instance.pk)
    assert not await sync_to_async(lambda: instance_now.gpu_claims.exists())()
