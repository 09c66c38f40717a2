"""A preset profile on an SSH host is reachable from the dashboard: the presets bind
`{api_host}`, the address the dashboard connects to, and a start that fails because of the
bind address says so."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from hosts import presets
from hosts.models import Engine, InstanceState, ServerProfile
from tests.hosts.lifecycle.conftest import ROOT, free_port, request_stop, start, wait_state

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sshd]

# Where the dashboard reaches the server: not the sshd's 127.0.0.1, as a container with its
# own address behind an SSH host is not (every 127/8 address is on the loopback device).
API_HOST = "127.0.0.2"


def preset_profile(host: Any, *, argv: list[str] | None = None, timeout: int = 60) -> ServerProfile:
    """The simulator preset as the admin form fills it, with this machine's python and a free
    port: the bind address is the preset's own `{api_host}`."""
    port = free_port()
    template = argv if argv is not None else list(presets.initial_data("simulator")["launch_argv"])  # type: ignore[call-overload]
    launch = [
        sys.executable if a == "python3" else str(port) if a == "30000" else a for a in template
    ]
    launch += ["--profile", "fast", "--workers", "1", "--gpus", "0", "--load-seconds", "1"]
    return ServerProfile.objects.create(
        name=f"preset {port}", engine=Engine.SIMULATOR, host=host, launch_argv=launch,
        workdir=str(ROOT), port=port, gpu_ids=[0], readiness_timeout_s=timeout,
        served_model_name="specdash-sim", api_host=API_HOST,
    )  # fmt: skip


async def test_a_preset_profile_on_an_ssh_host_reaches_ready_where_the_dashboard_connects(
    jobs: Any, sshd: Any, ssh_host: Any
) -> None:
    host = await sync_to_async(ssh_host)(sshd)
    profile = await sync_to_async(preset_profile)(host)
    assert presets.API_HOST in profile.launch_argv
    instance = await start(profile)
    assert instance.launch_argv[instance.launch_argv.index("--host") + 1] == API_HOST
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=90)
    assert ready.state == InstanceState.READY, ready.reason
    base_url = await sync_to_async(lambda: ready.base_url)()
    assert base_url.startswith(f"http://{API_HOST}:")
    await request_stop(ready)
    assert (await asyncio.wait_for(owner, 60))["outcome"] == "stopped"


async def test_a_loopback_bind_the_dashboard_cannot_reach_fails_naming_the_bind_problem(
    jobs: Any, sshd: Any, ssh_host: Any
) -> None:
    host = await sync_to_async(ssh_host)(sshd)
    argv = ["python3", "-m", "benchlib.simulator", "--host", "127.0.0.1", "--port", "30000"]
    profile = await sync_to_async(preset_profile)(host, argv=argv, timeout=8)
    instance = await start(profile)
    await asyncio.wait_for(jobs.run_next(instance.pk), 90)
    failed = await wait_state(instance.pk, InstanceState.FAILED, timeout=30)
    assert "Not ready after 8 s" in failed.reason
    assert "Bind problem" in failed.reason and API_HOST in failed.reason, failed.reason
    assert "listens on 127.0.0.1 only" in failed.reason


async def test_an_address_the_host_does_not_have_fails_naming_the_bind_problem(
    jobs: Any, sshd: Any, ssh_host: Any
) -> None:
    host = await sync_to_async(ssh_host)(sshd)
    # TEST-NET-1 (RFC 5737): never an address of this machine, so bind() fails EADDRNOTAVAIL.
    argv = ["python3", "-m", "benchlib.simulator", "--host", "192.0.2.1", "--port", "30000"]
    profile = await sync_to_async(preset_profile)(host, argv=argv, timeout=60)
    instance = await start(profile)
    await asyncio.wait_for(jobs.run_next(instance.pk), 90)
    failed = await wait_state(instance.pk, InstanceState.FAILED, timeout=30)
    assert "before it was ready" in failed.reason, failed.reason
    assert "Bind problem: the server could not bind 192.0.2.1" in failed.reason, failed.reason
