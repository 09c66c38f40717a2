from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from hosts import services
from hosts.models import (
    Container,
    Engine,
    Host,
    HostKind,
    ServerInstance,
    ServerProfile,
)
from tests.fixtures.ports import free_port as free_port  # also imported from here
from tests.fixtures.servers import ROOT as ROOT
from tests.fixtures.servers import SIM_BIN as SIM_BIN
from tests.fixtures.servers import marker_pids as marker_pids  # also imported from here
from tests.fixtures.sshd import SshServer, sshd, start_sshd, stop_sshd  # noqa: F401

FIXTURE_BIN = ROOT / "tests" / "fixtures" / "bin"
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the pve_sshd "node" knows: CT 129 runs, CT 131 exists but is stopped, others do not exist.
RUNNING_CT = "129"
STOPPED_CT = "131"


@pytest.fixture(autouse=True)
def _kill_leftovers(kill_leftover_servers: None) -> None:
    """Every test here may start servers: none outlives its test."""


@pytest.fixture
def sim_host(db: Any, sim_state: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Host:
    monkeypatch.setattr(settings, "SPECDASH_RUN_ROOT", str(tmp_path / "runs"))
    return Host.objects.create(
        name="sim", kind=HostKind.LOCAL, path_prepend=str(SIM_BIN),
        command_env={"SPECDASH_SIM_STATE_DIR": str(sim_state), "SPECDASH_SIM_GPU_COUNT": "4"},
    )  # fmt: skip


@pytest.fixture
def sim_profile(sim_host: Host, sim_state: Path) -> Callable[..., ServerProfile]:
    """Profiles of the simulator; ``host=``/``container=`` put one on another host."""
    count = iter(range(1000))

    def make(
        *extra: str,
        gpus: tuple[int, ...] = (0, 1),
        timeout: int = 60,
        host: Host | None = None,
        **fields: Any,
    ) -> ServerProfile:
        port = free_port()
        argv = [
            sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1", "--port", str(port),
            "--profile", "fast", "--gpus", ",".join(map(str, gpus)), "--workers", str(len(gpus)),
            "--gpu-memory-gb", "10", *extra,
        ]  # fmt: skip
        return ServerProfile.objects.create(
            name=f"sim {next(count)}", engine=Engine.SIMULATOR, host=host or sim_host, launch_argv=argv,
            env={"SPECDASH_SIM_STATE_DIR": str(sim_state), "SPECDASH_SIM_GPU_COUNT": "4"},
            workdir=str(ROOT), port=port, gpu_ids=list(gpus), readiness_timeout_s=timeout,
            served_model_name="specdash-sim", **fields,
        )  # fmt: skip

    return make


def gpu_used_mb(state: Path) -> dict[int, int]:
    out = subprocess.run(
        [str(SIM_BIN / "nvidia-smi"), "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
        env={**os.environ, "SPECDASH_SIM_STATE_DIR": str(state), "SPECDASH_SIM_GPU_COUNT": "4"},
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {int(a): int(b) for a, b in (line.split(",") for line in out.strip().splitlines())}


async def start(profile: ServerProfile) -> ServerInstance:
    return await sync_to_async(services.instance_start)(profile=profile)


async def request_stop(instance: ServerInstance) -> None:
    await sync_to_async(services.instance_stop)(instance=instance)


async def wait_state(instance_id: int, *states: str, timeout: float = 60) -> ServerInstance:
    async with asyncio.timeout(timeout):
        while True:
            instance = await ServerInstance.objects.aget(pk=instance_id)
            if instance.state in states:
                return instance
            await asyncio.sleep(0.1)


# ----------------------------------------------------------------------------- over ssh


@pytest.fixture(scope="session")
def pve_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """A second loopback sshd standing in for a Proxmox node: its sessions find the ``pct``
    stand-in on PATH (where /usr/sbin/pct is on a node), and CT 131 is a stopped CT.

    sshd's ``SetEnv`` sets this for every session, as a node's own environment would, so
    nothing in specdash's configuration has to know it is talking to a stand-in."""
    server = start_sshd(
        tmp_path_factory.mktemp("pve-sshd"),
        extra_config=(
            f"SetEnv PATH={FIXTURE_BIN}:{STANDARD_PATH} SPECDASH_FAKE_CTS={RUNNING_CT} "
            f"SPECDASH_FAKE_STOPPED_CTS={STOPPED_CT}",
        ),
    )
    try:
        yield server
    finally:
        stop_sshd(server)


def ssh_master_pids(control_dir: Path) -> list[int]:
    """The pids of the ssh master connections whose sockets are in ``control_dir``."""
    pids = []
    for socket_path in control_dir.glob("*"):
        check = subprocess.run(
            ["ssh", "-o", f"ControlPath={socket_path}", "-O", "check", "specdash-test"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
        match = re.search(r"pid=(\d+)", check.stderr)
        if match:
            pids.append(int(match.group(1)))
    return pids


@pytest.fixture
def ssh_control(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short, private var dir per test for the ssh control sockets (a master left by one
    test must not answer for another: it would skip the host-key check); closed after."""
    var_dir = Path(tempfile.mkdtemp(prefix="sdl-", dir="/tmp"))
    monkeypatch.setattr(settings, "VAR_DIR", var_dir)
    yield var_dir / "ssh-control"
    for pid in ssh_master_pids(var_dir / "ssh-control"):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
    shutil.rmtree(var_dir, ignore_errors=True)


@pytest.fixture
def ssh_host(
    db: Any, sim_state: Path, ssh_control: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Callable[..., Host]:
    """SSH hosts pointing at a loopback sshd, with the simulator's bin dir and state dir in
    their environment (the far side is this machine, so the paths hold there too)."""
    monkeypatch.setattr(settings, "SPECDASH_RUN_ROOT", str(tmp_path / "runs"))
    count = iter(range(1000))

    def make(server: SshServer, **overrides: Any) -> Host:
        fields: dict[str, Any] = {
            "name": f"ssh {next(count)}",
            "kind": HostKind.SSH,
            "address": server.host,
            "ssh_user": server.user,
            "ssh_port": server.port,
            "identity_file": str(server.identity_file),
            "known_hosts_file": str(server.known_hosts_file),
            "path_prepend": str(SIM_BIN),
            "command_env": {
                "SPECDASH_SIM_STATE_DIR": str(sim_state),
                "SPECDASH_SIM_GPU_COUNT": "4",
            },
        }
        fields.update(overrides)
        return Host.objects.create(**fields)

    return make


def pct_container(host: Host, ident: str = RUNNING_CT) -> Container:
    return Container.objects.create(host=host, kind="pct", ident=ident)
