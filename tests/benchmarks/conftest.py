from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from hosts.models import Host, InstanceState, ServerInstance, ServerProfile
from tests.fixtures.ports import free_port
from tests.fixtures.sshd import sshd  # noqa: F401 - the endpoint telemetry test's ssh host

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Simulator:
    port: int
    process: subprocess.Popen[bytes]
    model: str = "specdash-sim"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)


def start_simulator(tmp_path: Path, *extra: str, model: str = "specdash-sim") -> Simulator:
    port = free_port()
    log = (tmp_path / f"sim-{port}.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1", "--port", str(port),
         "--workers", "0", "--model", model, "--state-dir", str(tmp_path / "gpu"), *extra],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            # SGLang-style /health answers after ~1 s (it waits for a generation).
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200:
                return Simulator(port=port, process=process, model=model)
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(
                "simulator did not start: " + (tmp_path / f"sim-{port}.log").read_text()
            )
        time.sleep(0.1)


@pytest.fixture
def simulator(tmp_path: Path) -> Iterator[Simulator]:
    """A fast simulated server (near-zero model cost) on a free port."""
    sim = start_simulator(tmp_path, "--profile", "fast")
    try:
        yield sim
    finally:
        sim.kill()


@pytest.fixture
def slow_simulator(tmp_path: Path) -> Iterator[Simulator]:
    """The baseline profile: about 90 tok/s per stream, so a level of long requests lasts."""
    sim = start_simulator(tmp_path, "--profile", "baseline")
    try:
        yield sim
    finally:
        sim.kill()


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, settings: Any) -> Path:
    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    return tmp_path / "data"


@pytest.fixture
def make_ready_instance(
    make_profile: Callable[..., ServerProfile],
) -> Callable[..., ServerInstance]:
    def make(*, port: int | None = None, **profile_fields: Any) -> ServerInstance:
        profile = make_profile(**profile_fields)
        return ServerInstance.objects.create(
            profile=profile,
            host=profile.managed_host,
            port=port or profile.port,
            gpu_ids=[0, 1],
            state=InstanceState.READY,
            run_id=f"sd-{uuid.uuid4().hex[:16]}",
            launch_argv=[*profile.launch_argv, "--port", str(port or profile.port)],
            env={"SPECDASH_SIM_STATE_DIR": "/tmp/x", "HF_TOKEN": "hf_secret"},
            server_info={"version": "sim-1.0"},
        )

    return make


@pytest.fixture
def ready_instance(
    make_ready_instance: Callable[..., ServerInstance], local_host: Host
) -> ServerInstance:
    return make_ready_instance(served_model_name="sim-model")


def load(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"api": "completions", "requests_per_level": 20, "max_tokens": 4,
                            "input_tokens": 8}  # fmt: skip
    base.update(overrides)
    return base


def level_summary_event(index: int, concurrency: int, *, status: str = "completed",
                        ok: int = 10, failed: int = 0, tok_s: float = 500.0) -> Any:  # fmt: skip
    """A level_summary event line as the load generator writes it (trimmed to what we read,
    so its summary is not a whole LevelSummary: typed Any, for the event readers and the
    services' dicts alike)."""
    dist = lambda base: {"count": ok, "mean": base, "p50": base, "p90": base * 1.5, "p99": base * 2}  # noqa: E731
    return {
        "event": "level_summary",
        "level_index": index,
        "summary": {
            "concurrency": concurrency, "mode": "closed", "partial": status != "completed",
            "requests": {"total": ok + failed, "ok": ok, "failed": failed, "errors_by_cause": {}},
            "duration_s": 2.0, "output_tokens": int(tok_s * 2), "output_tok_s": tok_s,
            "total_tok_s": tok_s * 3, "request_rate": 5.0, "achieved_concurrency": concurrency * 0.95,
            "steady": {"target": concurrency, "reached": True, "output_tok_s": tok_s * 1.1, "duration_s": 1.5},
            "ttft_ms": dist(20.0), "tpot_ms": dist(3.0), "itl_ms": dist(2.5), "itl_chunk_ms": dist(5.0),
            "e2e_ms": dist(400.0), "mean_tokens_per_chunk": 2.0, "level_index": index,
            "status": status, "reason": None if status == "completed" else f"{status} by test",
            "client": {"client_limited": False},
        },
    }  # fmt: skip


def sample_event(
    index: int, t: float, *, tok_s: float = 100.0, in_flight: int = 2
) -> Any:  # a SampleEvent for the recorder, a plain dict for the services' samples
    return {"event": "sample", "level_index": index, "concurrency": 2, "t": t, "phase": "measure",
            "tok_s": tok_s, "in_flight": in_flight, "completed": 3, "errors": 0, "ttft_p50": 0.02,
            "loop_lag_ms": 1.0, "client_cpu": 5.0, "client_limited": False}  # fmt: skip
