"""What an operator reads on an instance: exit codes from the supervisor, reasons that never
say "None", the readiness budget kept, a stop grace per profile, and a dirty GPU with no
process to name explained by what nvidia-smi reports."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from hosts.models import Engine, Host, InstanceState, ServerInstance, ServerProfile
from tests.fixtures.procs import alive
from tests.hosts.lifecycle.conftest import (
    free_port,
    gpu_used_mb,
    marker_pids,
    request_stop,
    start,
    wait_state,
)

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_command_that_cannot_be_executed_fails_with_the_supervisors_127(
    jobs: Any, sim_host: Host, tmp_path: Path
) -> None:
    # It exists and is executable (preflight passes), but its interpreter does not exist.
    script = tmp_path / "engine"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    profile = await ServerProfile.objects.acreate(
        name="no exec", engine=Engine.CUSTOM, host=sim_host, launch_argv=[str(script)],
        port=free_port(), readiness_timeout_s=30,
    )  # fmt: skip
    instance = await start(profile)
    assert (await asyncio.wait_for(jobs.run_next(instance.pk), 60))["outcome"] == "failed"
    failed = await ServerInstance.objects.aget(pk=instance.pk)
    assert failed.state == InstanceState.FAILED
    assert failed.exit_code == 127
    assert "exit code 127: the command could not be executed" in failed.reason
    assert "could not start" in failed.log_tail
    assert "None" not in failed.reason


async def test_a_crash_with_no_exit_code_recorded_says_so_instead_of_none(
    jobs: Any, sim_profile: Any
) -> None:
    profile = await sync_to_async(sim_profile)()
    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=90)
    assert ready.state == InstanceState.READY, ready.reason
    # The supervisor dies with its server (an OOM killer's sweep): nobody writes exit_code.
    assert ready.supervisor_pid and ready.pid
    os.kill(ready.supervisor_pid, signal.SIGKILL)
    os.kill(ready.pid, signal.SIGKILL)
    assert (await asyncio.wait_for(owner, 90))["outcome"] == "crashed"
    crashed = await ServerInstance.objects.aget(pk=instance.pk)
    assert crashed.exit_code is None
    assert crashed.reason == "crashed: no exit code recorded"
    messages = [e.message async for e in crashed.events.all()]
    assert not any("None" in m for m in messages), messages


async def test_a_server_that_accepts_but_never_answers_is_abandoned_within_its_budget(
    jobs: Any, sim_host: Host
) -> None:
    port = free_port()
    # The kernel accepts connections into the backlog; nothing ever reads or answers them.
    silent = (
        "import socket, sys, time\n"
        "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen(128); time.sleep(600)\n"
    )
    profile = await ServerProfile.objects.acreate(
        name="silent", engine=Engine.CUSTOM, host=sim_host,
        launch_argv=[sys.executable, "-c", silent, str(port)], port=port,
        readiness_timeout_s=5, stop_grace_s=2,
    )  # fmt: skip
    instance = await start(profile)
    assert (await asyncio.wait_for(jobs.run_next(instance.pk), 90))["outcome"] == "failed"
    failed = await ServerInstance.objects.aget(pk=instance.pk)
    assert failed.reason.startswith("Not ready after 5 s"), failed.reason
    events = {e.state: e.at async for e in failed.events.filter(kind="state")}
    budget = (events[InstanceState.STOPPING] - events[InstanceState.LOADING]).total_seconds()
    # The HTTP timeout (10 s) no longer decides: the budget plus one status call at most.
    assert 5 <= budget < 8, budget


async def test_the_stop_grace_is_the_profiles_and_the_instance_page_shows_it(
    jobs: Any, sim_profile: Any, sim_state: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settings, "SPECDASH_STOP_GRACE_S", 7)
    default = await sync_to_async(sim_profile)()
    assert default.stop_grace_s == 7  # a new profile starts from the deployment's setting
    profile = await sync_to_async(sim_profile)("--fault-ignore-sigterm", stop_grace_s=1)
    before = gpu_used_mb(sim_state)
    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=90)
    assert ready.state == InstanceState.READY, ready.reason
    await request_stop(ready)
    assert (await asyncio.wait_for(owner, 90))["outcome"] == "stopped"
    stopped = await ServerInstance.objects.aget(pk=instance.pk)
    stop = stopped.evidence["stop"]
    assert stop["killed"], stop  # they ignored SIGTERM for the whole (short) grace
    assert 1 <= stop["duration"] < 7, stop
    assert gpu_used_mb(sim_state) == before

    def page() -> str:
        user = get_user_model().objects.create_superuser("op", password="pw-long-enough")
        client = Client()
        client.force_login(user)
        response = client.get(reverse("hosts:instance-detail", args=[instance.pk]))
        assert response.status_code == 200
        return response.content.decode()

    assert "1 s (SIGTERM, then SIGKILL)" in await sync_to_async(page)()


async def test_a_dirty_gpu_with_no_process_to_name_says_what_nvidia_smi_reports(
    jobs: Any, sim_profile: Any, sim_state: Path
) -> None:
    profile = await sync_to_async(sim_profile)()
    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=90)
    assert ready.state == InstanceState.READY, ready.reason
    # Memory on GPU 0 that no visible process holds a device file for (another container's
    # process, as nvidia-smi counts it): a ledger entry of a live process with no open fd.
    foreign = await sync_to_async(_foreign_gpu_memory)(sim_state, gpu=0, mib=6000)
    try:
        await request_stop(ready)
        assert (await asyncio.wait_for(owner, 90))["outcome"] == "dirty"
    finally:
        foreign.kill()
        foreign.wait()
    dirty = await ServerInstance.objects.aget(pk=instance.pk)
    assert dirty.state == InstanceState.DIRTY
    assert not [h for h in dirty.evidence["holders"] if h.get("counts")]
    assert "no process holds the GPU device files (fd scan)" in dirty.reason
    assert "nvidia-smi reports GPU 0: " in dirty.reason and "MiB used" in dirty.reason
    assert not marker_pids(ready.run_id) and not alive(ready.pid or 0)


def _foreign_gpu_memory(sim_state: Path, *, gpu: int, mib: int) -> subprocess.Popen[bytes]:
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    stat = Path(f"/proc/{foreign.pid}/stat").read_text()
    entry = {"pid": foreign.pid, "start_time": int(stat.rsplit(")", 1)[1].split()[19]),
             "role": "foreign", "memory_mib": {str(gpu): mib}, "utilization": {}, "updated": 0}  # fmt: skip
    (sim_state / "ledger" / f"{foreign.pid}.json").write_text(json.dumps(entry))
    return foreign
