from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from benchlib.simulator.app import SimApp
from benchlib.simulator.asgi_types import Message, Scope
from tests.fixtures.procs import alive

ROOT = Path(__file__).resolve().parents[3]
SMI = ROOT / "benchlib" / "simulator" / "bin" / "nvidia-smi"


# ---- in-process ASGI calls -------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: dict[bytes, bytes]
    bodies: list[bytes] = field(default_factory=list)

    @property
    def body(self) -> bytes:
        return b"".join(self.bodies)

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[str]:
        """SSE data payloads in order (including the final [DONE])."""
        return re.findall(r"^data: (.*)$", self.body.decode(), flags=re.M)


async def call(
    app: SimApp,
    method: str,
    path: str,
    body: Any = None,
    headers: list[tuple[bytes, bytes]] | None = None,
) -> Reply:
    raw = body if isinstance(body, bytes) else (b"" if body is None else json.dumps(body).encode())
    delivered = False
    closed = asyncio.Event()
    messages: list[Message] = []

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await closed.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        messages.append(message)

    scope: Scope = {"type": "http", "method": method, "path": path, "headers": headers or []}
    await app(scope, receive, send)
    closed.set()
    start = messages[0]
    reply = Reply(start["status"], dict(start.get("headers", [])))
    reply.bodies = [m.get("body", b"") for m in messages[1:]]
    return reply


# ---- real simulator processes ----------------------------------------------------------------


def marked_pids(marker: str) -> list[int]:
    """Processes whose environment carries SPECDASH_RUN_ID=<marker> (survives setsid/orphaning)."""
    needle = f"SPECDASH_RUN_ID={marker}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(name))
        except OSError:
            continue
    return found


def wait_until(predicate: Any, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode().strip()


@dataclass
class Sim:
    proc: subprocess.Popen[bytes]
    log: Path
    state_dir: Path
    marker: str
    port: int = 0

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_for(self, needle: str, timeout: float = 20.0) -> None:
        if not wait_until(lambda: needle in self.text() or self.proc.poll() is not None, timeout):
            raise AssertionError(f"{needle!r} not logged in {timeout}s:\n{self.text()}")
        if needle not in self.text():
            raise AssertionError(f"exited {self.proc.returncode} before {needle!r}:\n{self.text()}")

    def wait_bound(self) -> None:
        self.wait_for("HTTP server bound to")
        match = re.search(r"bound to http://[\d.]+:(\d+)", self.text())
        assert match is not None
        self.port = int(match.group(1))

    def workers(self) -> list[int]:
        return children_of(self.proc.pid)


def smi(state_dir: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{SMI.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "SPECDASH_SIM_STATE_DIR": str(state_dir),
    }
    return subprocess.run(
        ["nvidia-smi", *args],
        env=env,
        cwd=cwd or state_dir,
        capture_output=True,
        text=True,
        timeout=20,
    )


def gpu_used(state_dir: Path) -> dict[int, int]:
    out = smi(state_dir, "--query-gpu=index,memory.used", "--format=csv,noheader,nounits")
    assert out.returncode == 0, out.stderr
    return {int(a): int(b) for a, b in (line.split(", ") for line in out.stdout.splitlines())}


class SimFactory:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.marker = f"simtest-{uuid.uuid4().hex[:12]}"
        self.state_dir = base / "gpu-state"
        self.sims: list[Sim] = []

    def start(self, *args: str, ready: bool = True, profile: str = "fast") -> Sim:
        log = self.base / f"sim{len(self.sims)}.log"
        env = {
            **os.environ,
            "SPECDASH_RUN_ID": self.marker,
            "SPT_NOENV": "1",
            "SPECDASH_SIM_STATE_DIR": str(self.state_dir),
            "SPECDASH_SIM_GPU_COUNT": "4",
        }
        argv = [sys.executable, "-m", "benchlib.simulator", "--port", "0", "--profile", profile]
        argv += ["--state-dir", str(self.state_dir), "--gpu-memory-gb", "40", *args]
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        sim = Sim(proc, log, self.state_dir, self.marker)
        self.sims.append(sim)
        if ready:
            sim.wait_bound()
            sim.wait_for("ready to roll")
        return sim

    def cleanup(self) -> None:
        for pid in marked_pids(self.marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for sim in self.sims:
            if sim.proc.poll() is None:
                sim.proc.kill()
            sim.proc.wait(10)
        wait_until(lambda: not [p for p in marked_pids(self.marker) if alive(p)], 5)


@pytest.fixture
def sims(tmp_path: Path):
    factory = SimFactory(tmp_path)
    yield factory
    factory.cleanup()


@pytest.fixture(scope="module")
def module_sims(tmp_path_factory: pytest.TempPathFactory):
    factory = SimFactory(tmp_path_factory.mktemp("sim"))
    yield factory
    factory.cleanup()
