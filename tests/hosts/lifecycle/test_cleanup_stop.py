"""Stop on an instance that already ended (failed, crashed, lost): leftovers happen, so the
state machine allows a verified clean-up stop from those states. Its port and GPUs may be
another instance's by then: those are left out of the verification, never taken back."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from core.models import Job, JobState
from hosts import services
from hosts.models import GpuClaim, InstanceState, ServerInstance, ServerProfile
from tests.fixtures.procs import alive
from tests.hosts.lifecycle.conftest import gpu_used_mb, marker_pids, start, wait_state

pytestmark = pytest.mark.django_db(transaction=True)


async def _ended_with_leftovers(
    jobs: Any, sim_profile: Any, state: str, **fields: Any
) -> tuple[ServerInstance, list[int]]:
    """A ready server whose owner stopped watching, then whose main process died: its
    workers (``--fault-orphan-workers``) live on with their GPU memory, and the instance is
    recorded as ``state`` with its claims released, as after a start that failed late or a
    crash whose clean-up could not reach the host."""
    profile = await sync_to_async(sim_profile)("--fault-orphan-workers", **fields)
    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=90)
    assert ready.state == InstanceState.READY, ready.reason
    owner.cancel()
    await asyncio.gather(owner, return_exceptions=True)
    # As its worker records a cancelled job (no adoption here: the test decides the state).
    await Job.objects.filter(params__instance_id=instance.pk).aupdate(state=JobState.INTERRUPTED)
    assert ready.pid is not None
    os.kill(ready.pid, signal.SIGKILL)
    async with asyncio.timeout(30):
        while alive(ready.pid):
            await asyncio.sleep(0.05)
    leftovers = [p for p in marker_pids(ready.run_id) if alive(p)]
    assert leftovers, "the orphan workers should outlive the server"
    await ServerInstance.objects.filter(pk=instance.pk).aupdate(
        state=state, reason=f"recorded {state} by the test"
    )
    await GpuClaim.objects.filter(instance_id=instance.pk).adelete()
    return await ServerInstance.objects.aget(pk=instance.pk), leftovers


@pytest.mark.parametrize("ended", [InstanceState.FAILED, InstanceState.CRASHED])
async def test_stop_on_a_failed_or_crashed_instance_cleans_up_its_leftovers_verified(
    jobs: Any, sim_profile: Any, sim_state: Path, ended: str
) -> None:
    before = gpu_used_mb(sim_state)
    instance, leftovers = await _ended_with_leftovers(jobs, sim_profile, ended)
    assert gpu_used_mb(sim_state) != before

    await sync_to_async(services.instance_stop)(instance=instance)
    result = await asyncio.wait_for(jobs.run_next(instance.pk), 90)

    assert result["outcome"] == ended
    final = await ServerInstance.objects.aget(pk=instance.pk)
    assert final.state == ended, (final.reason, final.evidence)
    assert final.reason == f"recorded {ended} by the test"  # its story is kept
    assert final.stop_requested is False
    assert not any(alive(p) for p in leftovers)
    assert gpu_used_mb(sim_state) == before
    assert not await GpuClaim.objects.filter(instance_id=instance.pk).aexists()
    states = [
        (e.state, e.message)
        async for e in final.events.filter(kind="state").order_by("pk")
        if e.message.startswith("Clean-up stop")
    ]
    assert [s for s, _ in states] == [InstanceState.STOPPING, ended]
    assert "Clean-up stop verified" in states[-1][1]


async def test_stop_of_a_lost_instance_whose_port_was_reclaimed_completes_without_taking_it(
    jobs: Any, sim_profile: Any, sim_state: Path
) -> None:
    before = gpu_used_mb(sim_state)
    lost, leftovers = await _ended_with_leftovers(jobs, sim_profile, InstanceState.LOST)
    # Another operator starts a server on the same port (other GPUs) meanwhile.
    other_profile = await ServerProfile.objects.acreate(
        name="same port", engine="simulator", host_id=lost.host_id, launch_argv=["true"],
        port=lost.port, gpu_ids=[2, 3],
    )  # fmt: skip
    other = await sync_to_async(services.instance_start)(profile=other_profile)

    await sync_to_async(services.instance_stop)(instance=lost)
    result = await asyncio.wait_for(jobs.run_next(lost.pk), 90)

    assert result["outcome"] == InstanceState.STOPPED
    final = await ServerInstance.objects.aget(pk=lost.pk)
    assert final.state == InstanceState.STOPPED, (final.reason, final.evidence)
    assert final.stop_requested is False
    assert (
        final.evidence["not_checked"]
        == f"port {lost.port} (held by instance #{other.pk} (starting))"
    )
    messages = [e.message async for e in final.events.all()]
    assert any(f"is held by instance #{other.pk}" in m for m in messages), messages
    assert not any(alive(p) for p in leftovers)
    assert gpu_used_mb(sim_state) == before
    still = await ServerInstance.objects.aget(pk=other.pk)
    assert still.state == InstanceState.STARTING and still.port == lost.port
