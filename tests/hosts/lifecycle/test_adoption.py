"""Case 13: the dashboard restarts while a server runs. The worker that owned the server's
job shuts down (its job ends ``interrupted`` and the interrupt hook queues an adopting job);
the next worker re-adopts the server when its processes are alive, so a later stop works,
and marks it ``lost``, with the evidence, when they are gone. Never "ready" forever."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from core.jobs.worker import Worker, WorkerSettings
from core.models import Job, JobState
from hosts.lifecycle import steps
from hosts.models import InstanceEvent, InstanceState, ServerInstance
from tests.fixtures.procs import alive
from tests.hosts.lifecycle.conftest import gpu_used_mb, marker_pids, request_stop, start, wait_state
from tests.hosts.lifecycle.test_ssh_drops import interpose

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def workers() -> AsyncIterator[Callable[[str], asyncio.Event]]:
    """Start in-process workers (a dashboard each); returns the event that shuts one down."""
    running: list[tuple[asyncio.Event, asyncio.Task[None]]] = []

    def launch(name: str) -> asyncio.Event:
        stop = asyncio.Event()
        worker = Worker(worker_id=name, settings=WorkerSettings(poll_interval=0.1))
        running.append((stop, asyncio.create_task(worker.run(stop))))
        return stop

    yield launch
    for stop, task in running:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 60)


async def shut_down_the_first_dashboard(
    workers: Callable[[str], asyncio.Event], instance_id: int
) -> list[Job]:
    stop = workers("dashboard-1")
    ready = await wait_state(instance_id, InstanceState.READY, InstanceState.FAILED)
    assert ready.state == InstanceState.READY, ready.reason
    stop.set()  # the worker cancels its tasks on the way out, as on SIGTERM
    async with asyncio.timeout(30):
        while not await Job.objects.filter(
            params__instance_id=instance_id, state=JobState.QUEUED
        ).aexists():
            await asyncio.sleep(0.05)
    return [job async for job in Job.objects.filter(params__instance_id=instance_id).order_by("pk")]


async def test_a_live_server_is_readopted_after_a_restart_and_a_later_stop_works(
    workers: Any, sim_profile: Any, sim_state: Path
) -> None:
    profile = await sync_to_async(sim_profile)()
    before = gpu_used_mb(sim_state)
    instance = await start(profile)
    jobs = await shut_down_the_first_dashboard(workers, instance.pk)
    assert [(j.state, j.params.get("adopt", False)) for j in jobs] == [
        (JobState.INTERRUPTED, False),
        (JobState.QUEUED, True),
    ]
    held = await ServerInstance.objects.aget(pk=instance.pk)
    assert held.state == InstanceState.READY and held.pid and alive(held.pid)

    workers("dashboard-2")
    async with asyncio.timeout(30):
        while not await held.events.filter(
            message="Re-adopted after a dashboard restart"
        ).aexists():
            await asyncio.sleep(0.1)
    adopter = await Job.objects.aget(pk=jobs[1].pk)
    assert adopter.state == JobState.RUNNING and adopter.worker_id == "dashboard-2"
    assert (await ServerInstance.objects.aget(pk=instance.pk)).state == InstanceState.READY

    await request_stop(held)
    stopped = await wait_state(instance.pk, InstanceState.STOPPED, InstanceState.DIRTY)
    assert stopped.state == InstanceState.STOPPED, (stopped.reason, stopped.evidence)
    assert not alive(held.pid)
    assert gpu_used_mb(sim_state) == before
    async with asyncio.timeout(30):
        while (await Job.objects.aget(pk=adopter.pk)).state != JobState.SUCCEEDED:
            await asyncio.sleep(0.1)


async def test_a_server_gone_during_the_restart_is_marked_lost_with_the_evidence(
    workers: Any, sim_profile: Any, sim_state: Path
) -> None:
    profile = await sync_to_async(sim_profile)()
    before = gpu_used_mb(sim_state)
    instance = await start(profile)
    await shut_down_the_first_dashboard(workers, instance.pk)
    held = await ServerInstance.objects.aget(pk=instance.pk)
    for pid in marker_pids(held.run_id):  # the host rebooted, or someone killed it all
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)

    workers("dashboard-2")
    after_ready = [s for s in InstanceState.values if s != InstanceState.READY]
    lost = await wait_state(instance.pk, *after_ready, timeout=30)
    assert lost.state == InstanceState.LOST, lost.reason
    assert "Server gone after a dashboard restart" in lost.reason
    status = lost.evidence["status"]
    assert status["alive"] is False
    assert [m for m in status["members"] if m["state"] not in ("Z", "X")] == []
    assert not await sync_to_async(lambda: lost.gpu_claims.exists())()
    assert gpu_used_mb(sim_state) == before


async def test_workers_that_outlived_their_server_during_the_restart_are_found_and_cleaned_up(
    workers: Any, sim_profile: Any, sim_state: Path
) -> None:
    profile = await sync_to_async(sim_profile)("--fault-orphan-workers")
    before = gpu_used_mb(sim_state)
    instance = await start(profile)
    await shut_down_the_first_dashboard(workers, instance.pk)
    held = await ServerInstance.objects.aget(pk=instance.pk)
    assert held.pid is not None
    os.kill(held.pid, signal.SIGKILL)  # the server dies while no dashboard watches
    orphans = [p for p in marker_pids(held.run_id) if p != held.pid and alive(p)]
    assert orphans, "the orphan workers should survive their parent"
    assert gpu_used_mb(sim_state) != before  # ...and keep their GPU memory

    workers("dashboard-2")
    final = await wait_state(instance.pk, InstanceState.CRASHED, InstanceState.DIRTY, timeout=60)
    assert final.state == InstanceState.CRASHED, (final.reason, final.evidence)
    # The clean-up after the crash runs in the same job: it ends by releasing the GPU claims
    # once the verification found them free.
    async with asyncio.timeout(30):
        while await sync_to_async(lambda: final.gpu_claims.exists())():
            await asyncio.sleep(0.1)
    final = await ServerInstance.objects.aget(pk=instance.pk)
    assert final.state == InstanceState.CRASHED
    assert final.exit_code == -9
    assert not any(alive(p) for p in orphans)
    assert gpu_used_mb(sim_state) == before


def _hang_after_the_first_launch(
    monkeypatch: pytest.MonkeyPatch, then: Callable[[], None] | None = None
) -> None:
    """The dashboard dies after the far side launched and before the answer was recorded:
    the first launch's answer never arrives (the worker is then shut down), so the
    database still has no pid. Later launches (the adopter's) pass through."""

    launches: list[str] = []  # over all transports: each job builds its own

    async def hang(command: str, attempt: int) -> None:
        if command == "launch":
            launches.append(command)
        if command == "launch" and len(launches) == 1:
            if then is not None:
                await sync_to_async(then)()
            await asyncio.Event().wait()

    interpose(monkeypatch, after=hang)


async def _die_during_the_launch(workers: Any, instance_id: int) -> None:
    stop = workers("dashboard-1")
    async with asyncio.timeout(60):
        while not await InstanceEvent.objects.filter(
            instance_id=instance_id, message__startswith="Launch answer pending"
        ).aexists():
            await asyncio.sleep(0.05)
    stop.set()
    async with asyncio.timeout(30):
        while not await Job.objects.filter(
            params__instance_id=instance_id, params__adopt=True
        ).aexists():
            await asyncio.sleep(0.05)


async def test_a_server_launched_while_the_dashboard_died_is_found_by_marker_and_adopted(
    workers: Any, sim_profile: Any, sim_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = await sync_to_async(sim_profile)()
    before = gpu_used_mb(sim_state)
    instance = await start(profile)
    _hang_after_the_first_launch(monkeypatch, then=lambda: _note_pending(instance.pk))
    await _die_during_the_launch(workers, instance.pk)
    held = await ServerInstance.objects.aget(pk=instance.pk)
    assert held.pid is None and held.state == InstanceState.STARTING
    launched = marker_pids(held.run_id)
    assert launched and all(alive(p) for p in launched)

    workers("dashboard-2")
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.LOST,
                             InstanceState.FAILED, timeout=60)  # fmt: skip
    assert ready.state == InstanceState.READY, (ready.reason, ready.evidence)
    assert ready.pid in launched and alive(ready.pid)
    assert ready.baseline_gpu_memory == {str(g): before[g] for g in (0, 1)}
    messages = [e.message async for e in ready.events.all()]
    assert any(m.startswith("Found") and "by marker" in m for m in messages), messages
    assert "Re-attached to the server already running for this run id" in messages
    assert await sync_to_async(lambda: ready.gpu_claims.count())() == 2

    await request_stop(ready)
    stopped = await wait_state(instance.pk, InstanceState.STOPPED, InstanceState.DIRTY)
    assert stopped.state == InstanceState.STOPPED, (stopped.reason, stopped.evidence)
    assert not any(alive(p) for p in launched)
    assert gpu_used_mb(sim_state) == before


async def test_leftovers_of_a_launch_interrupted_by_a_restart_are_stopped_and_verified(
    workers: Any, sim_profile: Any, sim_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = await sync_to_async(sim_profile)("--fault-orphan-workers")
    before = gpu_used_mb(sim_state)
    instance = await start(profile)

    def kill_the_server() -> None:
        # The server itself dies too; its workers (and their GPU memory) outlive it.
        deadline = time.monotonic() + 60
        while gpu_used_mb(sim_state) == before:  # its workers have loaded
            assert time.monotonic() < deadline, "the workers never allocated GPU memory"
            time.sleep(0.1)
        _note_pending(instance.pk)
        run = ServerInstance.objects.get(pk=instance.pk).run_id
        info = json.loads((Path(settings.SPECDASH_RUN_ROOT) / run / "server.json").read_text())
        os.kill(int(info["pid"]), signal.SIGKILL)

    _hang_after_the_first_launch(monkeypatch, then=kill_the_server)
    await _die_during_the_launch(workers, instance.pk)
    held = await ServerInstance.objects.aget(pk=instance.pk)
    assert held.pid is None
    assert gpu_used_mb(sim_state) != before
    leftovers = [p for p in marker_pids(held.run_id) if alive(p)]
    assert leftovers

    workers("dashboard-2")
    final = await wait_state(instance.pk, InstanceState.FAILED, InstanceState.LOST,
                             InstanceState.DIRTY, InstanceState.READY, timeout=90)  # fmt: skip
    assert final.state == InstanceState.FAILED, (final.reason, final.evidence)
    assert "left without a server" in final.reason
    assert not any(alive(p) for p in leftovers)
    assert not await sync_to_async(lambda: final.gpu_claims.exists())()
    assert gpu_used_mb(sim_state) == before


async def test_nothing_found_by_marker_after_a_restart_is_lost_with_what_was_asked(
    workers: Any, sim_profile: Any, sim_state: Path
) -> None:
    profile = await sync_to_async(sim_profile)()
    instance = await start(profile)
    # The first dashboard died before its job ran: no launch, nothing on the far side.
    await Job.objects.filter(params__instance_id=instance.pk).aupdate(state=JobState.INTERRUPTED)
    await sync_to_async(steps.enqueue_adoption)(instance.pk)
    workers("dashboard-2")
    lost = await wait_state(instance.pk, InstanceState.LOST, InstanceState.READY,
                            InstanceState.FAILED, timeout=60)  # fmt: skip
    assert lost.state == InstanceState.LOST
    assert "no process carries its marker" in lost.reason
    assert lost.evidence["members"]["members"] == []
    assert lost.evidence["log"]["exists"] is False


def _note_pending(instance_id: int) -> None:
    from hosts import services

    services.instance_record_event(
        instance=ServerInstance.objects.get(pk=instance_id),
        message="Launch answer pending (the test holds it back)",
    )
