"""The lifecycle end to end on this machine with the simulator: real processes, real kills,
the simulated GPU ledger read through the nvidia-smi stand-in."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from hosts.models import InstanceState, ServerInstance
from tests.fixtures.procs import alive
from tests.hosts.lifecycle.conftest import gpu_used_mb, request_stop, start, wait_state

pytestmark = pytest.mark.django_db(transaction=True)


async def test_start_becomes_ready_and_stop_is_verified_with_gpu_memory_back(
    jobs: Any, sim_profile: Any, sim_state: Path
) -> None:
    profile = await sync_to_async(sim_profile)("--load-seconds", "1")
    before = gpu_used_mb(sim_state)
    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED)
    assert ready.state == InstanceState.READY, ready.reason
    assert ready.pid and alive(ready.pid)
    during = gpu_used_mb(sim_state)
    assert during[0] > before[0] and during[1] > before[1]
    await request_stop(ready)
    assert (await asyncio.wait_for(owner, 60))["outcome"] == "stopped"
    stopped = await ServerInstance.objects.aget(pk=instance.pk)
    assert stopped.state == InstanceState.STOPPED, (stopped.reason, stopped.evidence)
    assert gpu_used_mb(sim_state) == before
    assert not alive(ready.pid)
    states = [s async for s in stopped.events.filter(kind="state").values_list("state", flat=True)]
    assert states == ["loading", "ready", "stopping", "stopped"]
    assert not await sync_to_async(lambda: stopped.gpu_claims.exists())()


async def test_oom_at_start_fails_with_exit_code_and_log_tail(
    jobs: Any, sim_profile: Any, sim_state: Path
) -> None:
    profile = await sync_to_async(sim_profile)("--fail-oom-at-start")
    instance = await start(profile)
    await asyncio.wait_for(jobs.run_next(instance.pk), 60)
    failed = await ServerInstance.objects.aget(pk=instance.pk)
    assert failed.state == InstanceState.FAILED
    assert failed.exit_code == 1
    assert "out of memory" in failed.log_tail.lower()
    assert "exited with code 1" in failed.reason


async def test_missing_binary_is_refused_by_preflight(jobs: Any, sim_profile: Any) -> None:
    profile = await sync_to_async(sim_profile)()
    profile.launch_argv = ["/nonexistent/sglang-server", "--port", "1"]
    await sync_to_async(profile.save)()
    instance = await start(profile)
    await asyncio.wait_for(jobs.run_next(instance.pk), 60)
    failed = await ServerInstance.objects.aget(pk=instance.pk)
    assert failed.state == InstanceState.FAILED
    assert "Preflight" in failed.reason and "nonexistent" in failed.reason
    assert failed.pid is None


async def test_port_held_by_a_foreign_process_is_refused_and_names_it(
    jobs: Any, sim_profile: Any
) -> None:
    profile = await sync_to_async(sim_profile)()
    holder = socket.socket()
    holder.bind(("127.0.0.1", profile.port))  # bound, not listening: like vLLM while loading
    try:
        instance = await start(profile)
        await asyncio.wait_for(jobs.run_next(instance.pk), 60)
    finally:
        holder.close()
    failed = await ServerInstance.objects.aget(pk=instance.pk)
    assert failed.state == InstanceState.FAILED
    assert str(profile.port) in failed.reason


async def test_readiness_timeout_abandons_the_start_with_a_verified_kill(
    jobs: Any, sim_profile: Any, sim_state: Path
) -> None:
    profile = await sync_to_async(sim_profile)("--load-seconds", "120", timeout=3)
    before = gpu_used_mb(sim_state)
    instance = await start(profile)
    await asyncio.wait_for(jobs.run_next(instance.pk), 90)
    failed = await ServerInstance.objects.aget(pk=instance.pk)
    assert failed.state == InstanceState.FAILED
    assert "Not ready after 3 s" in failed.reason
    assert failed.pid and not alive(failed.pid)
    assert gpu_used_mb(sim_state) == before


@pytest.mark.parametrize(
    ("flags", "expect_killed"),
    [
        (("--fault-ignore-sigterm",), True),  # case 5: escalation to SIGKILL after the grace
        (("--fault-setsid-workers",), False),  # case 6: out of the group, found by marker
    ],
)
async def test_stop_finds_every_worker_and_escalates(
    jobs: Any,
    sim_profile: Any,
    sim_state: Path,
    monkeypatch: pytest.MonkeyPatch,
    flags: tuple[str, ...],
    expect_killed: bool,
) -> None:
    monkeypatch.setattr(settings, "SPECDASH_STOP_GRACE_S", 2)  # the profiles' default
    profile = await sync_to_async(sim_profile)(*flags)
    before = gpu_used_mb(sim_state)
    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED)
    assert ready.state == InstanceState.READY, ready.reason
    await request_stop(ready)
    await asyncio.wait_for(owner, 60)
    stopped = await ServerInstance.objects.aget(pk=instance.pk)
    assert stopped.state == InstanceState.STOPPED, (stopped.reason, stopped.evidence)
    stop = stopped.evidence["stop"]
    assert bool(stop["killed"]) is expect_killed
    # Every member the stop found: parent + 2 workers (+ supervisor). A worker that leaves by
    # itself once its parent is gone, between the stop's scan and its signal, is "exited".
    found = stop["terminated"] + stop["killed"] + stop["exited"]
    assert len(found) >= 3, stop
    assert gpu_used_mb(sim_state) == before


async def test_unrelated_python_in_the_same_place_survives_a_stop(
    jobs: Any, sim_profile: Any
) -> None:
    # A long-lived bystander, never awaited: a blocking Popen is fine here.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # noqa: ASYNC220
    try:
        profile = await sync_to_async(sim_profile)()
        instance = await start(profile)
        owner = asyncio.create_task(jobs.run_next(instance.pk))
        ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED)
        await request_stop(ready)
        await asyncio.wait_for(owner, 60)
        assert (await ServerInstance.objects.aget(pk=instance.pk)).state == InstanceState.STOPPED
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()


async def test_parent_sigkill_is_a_crash_and_its_orphan_workers_are_cleaned_up(
    jobs: Any, sim_profile: Any, sim_state: Path
) -> None:
    profile = await sync_to_async(sim_profile)("--fault-orphan-workers")
    before = gpu_used_mb(sim_state)
    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED)
    assert ready.state == InstanceState.READY, ready.reason
    assert ready.pid is not None
    os.kill(ready.pid, signal.SIGKILL)
    crashed = await wait_state(instance.pk, InstanceState.CRASHED, InstanceState.DIRTY, timeout=15)
    assert crashed.state == InstanceState.CRASHED
    await asyncio.wait_for(owner, 60)
    final = await ServerInstance.objects.aget(pk=instance.pk)
    assert final.state == InstanceState.CRASHED
    assert final.exit_code == -9
    assert gpu_used_mb(sim_state) == before  # the orphans were found by marker and killed
    assert not await sync_to_async(lambda: final.gpu_claims.exists())()


async def test_crash_after_n_requests_is_seen_within_one_poll(jobs: Any, sim_profile: Any) -> None:
    import httpx

    profile = await sync_to_async(sim_profile)("--crash-after-requests", "1")
    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED)
    assert ready.state == InstanceState.READY, ready.reason
    async with httpx.AsyncClient() as client:
        for _ in range(3):
            try:
                await client.post(
                    f"http://127.0.0.1:{profile.port}/v1/completions",
                    json={"model": "specdash-sim", "prompt": "x", "max_tokens": 2},
                )
            except httpx.HTTPError:
                break
    crashed = await wait_state(instance.pk, InstanceState.CRASHED, InstanceState.DIRTY, timeout=10)
    assert crashed.state == InstanceState.CRASHED
    assert crashed.exit_code not in (None, 0)
    await asyncio.wait_for(owner, 60)
