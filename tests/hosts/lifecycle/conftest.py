from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from hosts import services
from hosts.jobs import JobContext
from hosts.jobs.registry import handler_for, load_handlers
from hosts.models import Engine, Host, HostKind, Job, JobState, ServerInstance, ServerProfile

ROOT = Path(settings.BASE_DIR)
SIM_BIN = ROOT / "benchmarks" / "simulator" / "bin"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _marker_pids(run_ids: set[str]) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for item in environ:
            if item.startswith(b"SPECDASH_RUN_ID=") and item.split(b"=", 1)[1].decode() in run_ids:
                found.append(int(entry))
    return found


@pytest.fixture
def sim_state(tmp_path: Path) -> Path:
    state = tmp_path / "sim-gpu"
    state.mkdir()
    return state


@pytest.fixture
def sim_host(db: Any, sim_state: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Host:
    monkeypatch.setattr(settings, "SPECDASH_RUN_ROOT", str(tmp_path / "runs"))
    return Host.objects.create(
        name="sim", kind=HostKind.LOCAL, path_prepend=str(SIM_BIN),
        command_env={"SPECDASH_SIM_STATE_DIR": str(sim_state), "SPECDASH_SIM_GPU_COUNT": "4"},
    )  # fmt: skip


@pytest.fixture
def sim_profile(sim_host: Host, sim_state: Path) -> Callable[..., ServerProfile]:
    count = iter(range(1000))

    def make(
        *extra: str, gpus: tuple[int, ...] = (0, 1), timeout: int = 60, **fields: Any
    ) -> ServerProfile:
        port = free_port()
        argv = [
            sys.executable, "-m", "benchmarks.simulator", "--host", "127.0.0.1", "--port", str(port),
            "--profile", "fast", "--gpus", ",".join(map(str, gpus)), "--workers", str(len(gpus)),
            "--gpu-memory-gb", "10", *extra,
        ]  # fmt: skip
        return ServerProfile.objects.create(
            name=f"sim {next(count)}", engine=Engine.SIMULATOR, host=sim_host, launch_argv=argv,
            env={"SPECDASH_SIM_STATE_DIR": str(sim_state), "SPECDASH_SIM_GPU_COUNT": "4"},
            workdir=str(ROOT), port=port, gpu_ids=list(gpus), readiness_timeout_s=timeout,
            served_model_name="specdash-sim", **fields,
        )  # fmt: skip

    return make


@pytest.fixture(autouse=True)
def _kill_leftovers() -> Iterator[None]:
    yield
    run_ids = set(ServerInstance.objects.values_list("run_id", flat=True)) if _db_ok() else set()
    for pid in _marker_pids(run_ids):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _db_ok() -> bool:
    try:
        ServerInstance.objects.exists()
    except Exception:
        return False
    return True


def gpu_used_mb(state: Path) -> dict[int, int]:
    out = subprocess.run(
        [str(SIM_BIN / "nvidia-smi"), "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
        env={**os.environ, "SPECDASH_SIM_STATE_DIR": str(state), "SPECDASH_SIM_GPU_COUNT": "4"},
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {int(a): int(b) for a, b in (line.split(",") for line in out.strip().splitlines())}


class JobRunner:
    """Runs the queued jobs of an instance in-process, as a worker would."""

    def __init__(self) -> None:
        load_handlers()

    async def run_next(
        self, instance_id: int, *, cancel_after: float | None = None
    ) -> dict[str, Any]:
        job = (
            await Job.objects.filter(state=JobState.QUEUED, params__instance_id=instance_id)
            .order_by("pk")
            .afirst()
        )
        assert job is not None, "no queued job"
        await Job.objects.filter(pk=job.pk).aupdate(state=JobState.RUNNING, worker_id="test")
        ctx = JobContext(job_id=job.pk, kind=job.kind, params=job.params, worker_id="test")
        handler = handler_for(job.kind)
        assert handler is not None
        result = await handler(ctx)
        await Job.objects.filter(pk=job.pk).aupdate(state=JobState.SUCCEEDED, result=result or {})
        return result or {}


@pytest.fixture
def jobs() -> JobRunner:
    return JobRunner()


async def start(profile: ServerProfile) -> ServerInstance:
    return await sync_to_async(services.instance_start)(profile=profile)


async def request_stop(instance: ServerInstance) -> None:
    await sync_to_async(services.instance_stop)(instance=instance)
