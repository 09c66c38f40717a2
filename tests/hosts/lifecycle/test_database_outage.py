"""A database that refuses writes for 30 s, then recovers, under a worker driving a live
(simulated) server: the worker says it is unhealthy, new work is refused, the worker goes on
by itself once the database is back, and a Stop issued during the outage is carried out."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from core.jobs.health import WorkerUnavailable, worker_health, worker_require
from core.jobs.worker import Worker, WorkerSettings
from core.models import WorkerBeat
from hosts import services
from hosts.models import InstanceState, ServerInstance
from tests.fixtures.procs import alive
from tests.hosts.lifecycle.conftest import gpu_used_mb, start, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

OUTAGE_S = 30.0
STOP_AFTER_S = 15.0  # the Stop is issued halfway through the outage
LEASE_S = 20.0  # shorter than the outage: the running job's lease expires during it


def _fresh_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on a thread of its own with its own connection: the worker's ORM thread is
    the one held up by the outage, and a reader must not queue behind it."""
    try:
        return fn()
    finally:
        connection.close()


async def _read(fn: Callable[[], Any]) -> Any:
    return await asyncio.to_thread(_fresh_thread, fn)


async def test_a_database_refusing_writes_for_30_s_then_back_the_worker_goes_on_and_a_stop_issued_meanwhile_is_carried_out(
    sim_profile: Any, sim_state: Path, settings: Any
) -> None:
    settings.SPECDASH_WORKER_REQUIRED = True
    settings.SPECDASH_JOB_LEASE_S = LEASE_S
    profile = await sync_to_async(sim_profile)(gpus=(0,))
    before = gpu_used_mb(sim_state)
    worker = Worker(
        worker_id="outage",
        settings=WorkerSettings(
            poll_interval=0.1, lease_seconds=LEASE_S, heartbeat_interval=2.0,
            retry_interval=0.5, retry_max_interval=5.0,
        ),
    )  # fmt: skip
    stop = asyncio.Event()
    task = asyncio.create_task(worker.run(stop))
    name = await sync_to_async(lambda: connection.settings_dict["NAME"])()
    holder = sqlite3.connect(name, timeout=30, isolation_level=None)
    try:
        while not await _read(lambda: WorkerBeat.objects.filter(worker_id="outage").exists()):
            await asyncio.sleep(0.1)
        instance = await start(profile)
        ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=90)
        assert ready.state == InstanceState.READY, ready.reason

        # Another connection takes SQLite's write lock: every write waits out the busy
        # timeout (20 s) and then fails "database is locked"; reads go on (WAL).
        holder.execute("BEGIN EXCLUSIVE")
        locked_at = time.monotonic()
        accepted: dict[str, Any] = {}

        def press_stop() -> None:
            time.sleep(STOP_AFTER_S)
            accepted["issued"] = time.monotonic() - locked_at
            try:
                services.instance_stop(instance=ServerInstance.objects.get(pk=instance.pk))
                accepted["at"] = time.monotonic() - locked_at
            except Exception as exc:
                accepted["error"] = exc
            finally:
                connection.close()

        stopper = threading.Thread(target=press_stop)
        stopper.start()

        while worker.health.healthy:
            assert time.monotonic() - locked_at < OUTAGE_S - 2, "the worker never said unhealthy"
            await asyncio.sleep(0.1)
        assert "database is locked" in worker.health.error, worker.health.error
        # Its beat is older than a lease: no reader counts it, and new work is refused.
        while (await _read(worker_health)).ok:
            assert time.monotonic() - locked_at < OUTAGE_S - 1, "the worker still counted alive"
            await asyncio.sleep(0.2)
        with pytest.raises(WorkerUnavailable):
            await _read(lambda: worker_require(kind="server.run"))
        await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - locked_at)))
        assert not task.done(), "the worker died during the outage"
        assert not worker.health.healthy
        holder.execute("COMMIT")
        released = time.monotonic() - locked_at

        await asyncio.to_thread(stopper.join, 60)
        assert "error" not in accepted, accepted
        assert accepted["issued"] < released <= accepted["at"] + 1.0, (accepted, released)
        deadline = time.monotonic() + 30
        while not worker.health.healthy:
            assert time.monotonic() < deadline, "the worker did not recover"
            await asyncio.sleep(0.1)
        assert (await _read(worker_health)).ok
        final = await _read(lambda: _wait_ended(instance.pk, 120))
        assert final.state == InstanceState.STOPPED, (final.state, final.reason, final.evidence)
        assert not alive(ready.pid)
        assert gpu_used_mb(sim_state) == before
        assert not task.done()
    finally:
        if holder.in_transaction:
            holder.execute("COMMIT")
        holder.close()
        stop.set()
        await asyncio.wait_for(task, 60)


def _wait_ended(instance_id: int, timeout: float) -> ServerInstance:
    ended = {InstanceState.STOPPED, InstanceState.FAILED, InstanceState.CRASHED,
             InstanceState.DIRTY, InstanceState.LOST}  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        found = ServerInstance.objects.get(pk=instance_id)
        if found.state in ended or time.monotonic() > deadline:
            return found
        time.sleep(0.2)
