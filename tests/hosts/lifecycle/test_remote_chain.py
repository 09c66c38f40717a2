"""The lifecycle through real hops: the simulator started over a loopback sshd, and over
ssh -> ``pct exec`` with the ``pct`` stand-in found on the ssh side's PATH (pve_sshd)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from hosts.lifecycle.remote import transport_for
from hosts.models import InstanceState, ServerInstance
from tests.fixtures.procs import alive
from tests.hosts.lifecycle.conftest import (
    RUNNING_CT,
    STOPPED_CT,
    free_port,
    gpu_used_mb,
    pct_container,
    request_stop,
    start,
    wait_state,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sshd]


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


@pytest.mark.parametrize("through_pct", [False, True], ids=["ssh", "ssh-pct"])
async def test_server_over_the_chain_becomes_ready_and_stops_with_gpu_memory_back(
    request: pytest.FixtureRequest,
    jobs: Any,
    sim_profile: Any,
    sim_state: Path,
    ssh_host: Any,
    through_pct: bool,
) -> None:
    server = request.getfixturevalue("pve_sshd" if through_pct else "sshd")
    host = await sync_to_async(ssh_host)(server)
    container = await sync_to_async(pct_container)(host) if through_pct else None
    chain = await sync_to_async(lambda: transport_for(host, container).describe())()
    expected_chain = f"ssh {server.user}@127.0.0.1:{server.port}"
    if through_pct:
        expected_chain += f" → pct exec {RUNNING_CT}"
    assert chain == expected_chain
    profile = await sync_to_async(sim_profile)(
        "--load-seconds", "1", host=host, container=container
    )
    before = gpu_used_mb(sim_state)

    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=90)
    assert ready.state == InstanceState.READY, ready.reason
    assert ready.pid and alive(ready.pid)
    # Launched by the agent in an ssh session of that sshd, not by this process.
    assert environ_of(ready.pid)["SSH_CONNECTION"].split()[-1] == str(server.port)
    assert environ_of(ready.pid)["SPECDASH_RUN_ID"] == ready.run_id
    during = gpu_used_mb(sim_state)
    assert during[0] > before[0] and during[1] > before[1]

    await request_stop(ready)
    assert (await asyncio.wait_for(owner, 90))["outcome"] == "stopped"
    stopped = await ServerInstance.objects.aget(pk=instance.pk)
    assert stopped.state == InstanceState.STOPPED, (stopped.reason, stopped.evidence)
    assert not alive(ready.pid)
    assert gpu_used_mb(sim_state) == before
    assert {str(k): v["used_mb"] for k, v in stopped.evidence["gpu_memory"].items()} == {
        str(k): before[k] for k in (0, 1)
    }


def _wrong_known_hosts(server: Any, directory: Path) -> Path:
    other_key = directory / "other_host_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)],
        check=True, capture_output=True,
    )  # fmt: skip
    key_type, key = Path(f"{other_key}.pub").read_text().split()[:2]
    known = directory / "known_hosts_wrong"
    known.write_text(f"[127.0.0.1]:{server.port} {key_type} {key}\n")
    return known


@pytest.mark.parametrize(
    "case", ["unknown container", "stopped container", "closed ssh port", "wrong host key"]
)
async def test_an_unreachable_hop_fails_the_start_naming_that_hop(
    pve_sshd: Any,
    jobs: Any,
    sim_profile: Any,
    ssh_host: Any,
    viewer: Any,
    tmp_path: Path,
    case: str,
) -> None:
    overrides: dict[str, Any] = {}
    if case == "closed ssh port":
        overrides["ssh_port"] = free_port()
    if case == "wrong host key":
        overrides["known_hosts_file"] = str(_wrong_known_hosts(pve_sshd, tmp_path))
    host = await sync_to_async(ssh_host)(pve_sshd, **overrides)
    ident = {"unknown container": "130", "stopped container": STOPPED_CT}.get(case, RUNNING_CT)
    container = await sync_to_async(pct_container)(host, ident)
    profile = await sync_to_async(sim_profile)(host=host, container=container)

    instance = await start(profile)
    await asyncio.wait_for(jobs.run_next(instance.pk), 90)
    failed = await ServerInstance.objects.aget(pk=instance.pk)

    ssh_hop = f"hop 1 (ssh {pve_sshd.user}@127.0.0.1:{host.ssh_port}): "
    pct_hop = f"hop 2 (pct exec {ident} on {pve_sshd.user}@127.0.0.1): "
    expected = {
        "unknown container": pct_hop + f"container {ident} does not exist (on this node)",
        "stopped container": pct_hop + f"container {ident} is not running",
        "closed ssh port": ssh_hop + "connection refused",
        "wrong host key": ssh_hop + "host key verification failed",
    }[case]
    assert failed.state == InstanceState.FAILED
    assert failed.reason.startswith(f"Could not run the preflight: {expected}"), failed.reason
    assert failed.pid is None  # nothing was launched
    assert not await sync_to_async(lambda: failed.gpu_claims.exists())()

    client = AsyncClient()
    await client.aforce_login(viewer)
    page = await client.get(f"/servers/instances/{instance.pk}/")
    assert page.status_code == 200
    assert expected in page.content.decode()
