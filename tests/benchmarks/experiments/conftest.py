"""Fixtures for experiments through the real lifecycle: a local host whose GPUs are the
simulator's ledger, simulated profiles, a job worker in the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from hosts.jobs.worker import Worker, WorkerSettings
from hosts.models import Engine, Host, HostKind, ServerInstance, ServerProfile
from tests.hosts.lifecycle.conftest import SIM_BIN, _db_ok, _marker_pids, free_port

ROOT = Path(settings.BASE_DIR)


@pytest.fixture
def sim_state(tmp_path: Path) -> Path:
    state = tmp_path / "sim-gpu"
    state.mkdir()
    return state


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
            sys.executable, "-m", "benchmarks.simulator", "--host", "127.0.0.1", "--port", str(port),
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


@pytest.fixture(autouse=True)
def _kill_leftovers() -> Iterator[None]:
    yield
    run_ids = set(ServerInstance.objects.values_list("run_id", flat=True)) if _db_ok() else set()
    for pid in _marker_pids(run_ids):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
async def worker() -> AsyncIterator[Worker]:
    """A job worker running in the test's event loop, stopped (and its jobs with it) after."""
    stop = asyncio.Event()
    w = Worker(worker_id="experiment-test", settings=WorkerSettings(poll_interval=0.1))
    task = asyncio.create_task(w.run(stop))
    try:
        yield w
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)
