"""Case 11: GPU memory not released. A process that specdash did not start (no marker)
keeps a simulated GPU device open after the server is gone: the stop ends ``dirty`` with that
holder as evidence, it survives the stop, and only the operator-confirmed kill of exactly
the listed holder frees the GPU and ends ``stopped``."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from core.models import Job
from hosts.models import InstanceState, ServerInstance
from tests.fixtures.procs import alive
from tests.hosts.lifecycle.conftest import gpu_used_mb, request_stop, start, wait_state

pytestmark = pytest.mark.django_db(transaction=True)

HOLDER = (
    "import sys, time\n"
    "device = open(sys.argv[1], 'rb')\n"
    "print('holding', flush=True)\n"
    "time.sleep(300)\n"
)


def start_time_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


async def kill_holders_jobs(instance_id: int) -> list[Job]:
    return [
        job
        async for job in Job.objects.filter(
            kind="server.kill_holders", params__instance_id=instance_id
        ).order_by("pk")
    ]


async def test_a_foreign_gpu_holder_makes_the_stop_dirty_and_only_its_confirmed_kill_cleans_it(
    jobs: Any, sim_profile: Any, sim_state: Path, operator: Any
) -> None:
    profile = await sync_to_async(sim_profile)(gpus=(0, 1))
    before = gpu_used_mb(sim_state)
    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED)
    assert ready.state == InstanceState.READY, ready.reason

    # Opened after the start (a preflight would have refused a held GPU), by this test,
    # so it carries no SPECDASH_RUN_ID marker: a foreign process.
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLDER, str(sim_state / "dev" / "nvidia0"),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert (await asyncio.wait_for(holder.stdout.readline(), 30)).strip() == b"holding"
        await request_stop(ready)
        assert (await asyncio.wait_for(owner, 60))["outcome"] == "dirty"
        dirty = await ServerInstance.objects.aget(pk=instance.pk)
        assert dirty.state == InstanceState.DIRTY
        assert not alive(ready.pid or 0)  # the server itself is gone
        assert holder.returncode is None and alive(holder.pid)  # the holder was not touched
        listed = [h for h in dirty.evidence["holders"] if h["pid"] == holder.pid]
        assert len(listed) == 1 and listed[0]["counts"]
        assert listed[0]["devices"] == [str(sim_state / "dev" / "nvidia0")]
        assert listed[0]["gpus"] == [0]
        assert f"pid {holder.pid} (python" in dirty.reason
        assert await sync_to_async(lambda: dirty.gpu_claims.count())() == 2  # still held

        client = AsyncClient()
        await client.aforce_login(operator)
        url = f"/servers/instances/{instance.pk}/kill-holders/"
        page = await client.get(f"/servers/instances/{instance.pk}/")
        assert f'value="{holder.pid}:{listed[0]["start_time"]}"' in page.content.decode()

        own = f"{os.getpid()}:{start_time_of(os.getpid())}"  # alive, but never listed
        wrong_start = f"{holder.pid}:{listed[0]['start_time'] + 1}"  # a reused pid
        the_holder = f"{holder.pid}:{listed[0]['start_time']}"
        for refused in (
            {"holder": [own], "confirm": "yes"},
            {"holder": [wrong_start], "confirm": "yes"},
            {"holder": [the_holder]},  # not confirmed
        ):
            response = await client.post(url, refused)
            assert response.status_code == 302
            assert await kill_holders_jobs(instance.pk) == []
        await client.post(url, {"holder": [own, the_holder], "confirm": "yes"})
        queued = await kill_holders_jobs(instance.pk)
        assert [job.params["holders"] for job in queued] == [
            [{"pid": holder.pid, "start_time": listed[0]["start_time"]}]
        ]

        assert (await asyncio.wait_for(jobs.run_next(instance.pk), 60))["outcome"] == "stopped"
        assert await asyncio.wait_for(holder.wait(), 10) == -9
        assert alive(os.getpid())
        stopped = await ServerInstance.objects.aget(pk=instance.pk)
        assert stopped.state == InstanceState.STOPPED, (stopped.reason, stopped.evidence)
        assert not [h for h in stopped.evidence["holders"] if h["counts"]]
        assert gpu_used_mb(sim_state) == before
        assert not await sync_to_async(lambda: stopped.gpu_claims.exists())()
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
