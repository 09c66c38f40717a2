"""Fixtures for experiments through the real lifecycle: a local host whose GPUs are the
simulator's ledger and simulated profiles. The ledger, the job worker in the test's event
loop and the leftover clean-up are tests/fixtures/servers.py's."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from hosts.models import Engine, Host, HostKind, ServerProfile
from tests.fixtures.ports import free_port
from tests.fixtures.servers import ROOT as ROOT  # also imported from here
from tests.fixtures.servers import SIM_BIN


@pytest.fixture(autouse=True)
def _kill_leftovers(kill_leftover_servers: None) -> None:
    """Every test here may start servers: none outlives its test."""


@pytest.fixture
def sim_host(db: Any, sim_state: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Host:
    monkeypatch.setattr(settings, "SPECDASH_RUN_ROOT", str(tmp_path / "runs"))
    # Short lifecycle polls keep a step's stop and start in the second range.
    monkeypatch.setattr(settings, "SPECDASH_STOP_GRACE_S", 5)  # the profiles' default
    return Host.objects.create(
        name="sim", kind=HostKind.LOCAL, path_prepend=str(SIM_BIN),
        command_env={"SPECDASH_SIM_STATE_DIR": str(sim_state), "SPECDASH_SIM_GPU_COUNT": "2"},
    )  # fmt: skip


@pytest.fixture
def sim_profile(sim_host: Host, sim_state: Path) -> Callable[..., ServerProfile]:
    """A simulated server on GPU 0 (so two profiles can never run at once)."""
    count = iter(range(1000))

    def make(sim_profile: str, *extra: str, name: str = "", speculative: bool = False,
             timeout: int = 60) -> ServerProfile:  # fmt: skip
        port = free_port()
        argv = [
            sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1", "--port", str(port),
            "--profile", sim_profile, "--gpus", "0", "--workers", "1", "--gpu-memory-gb", "10",
            "--load-seconds", "0.3", *extra,
        ]  # fmt: skip
        return ServerProfile.objects.create(
            name=name or f"sim {sim_profile} {next(count)}", engine=Engine.SIMULATOR, host=sim_host,
            launch_argv=argv, env={"SPECDASH_SIM_STATE_DIR": str(sim_state),
                                   "SPECDASH_SIM_GPU_COUNT": "2"},
            workdir=str(ROOT), port=port, gpu_ids=[0], readiness_timeout_s=timeout,
            served_model_name="specdash-sim", speculative=speculative,
        )  # fmt: skip

    return make
