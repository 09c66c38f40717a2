"""Run the agent exactly as the controller does, and watch real processes from the tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hosts.agent import AGENT_SOURCE, agent_argv, parse_agent_output

FIXTURES = Path(__file__).with_name("fixtures")
FAKE_ENGINE = FIXTURES / "fake_engine.py"
HOLDER = FIXTURES / "holder.py"
FAKE_NVIDIA_SMI = FIXTURES / "fake_nvidia_smi.py"


@dataclass
class AgentRun:
    result: dict[str, Any]
    stdout: str
    stderr: str
    returncode: int
    elapsed: float
    agent_pid: int


def run_agent(
    command: str, args: dict[str, Any], *, env: dict[str, str] | None = None, timeout: float = 90
) -> AgentRun:
    """`python3 - <command> <json>` with the agent's source on stdin, as a transport runs it."""
    started = time.monotonic()
    proc = subprocess.Popen(
        agent_argv(command, args, python=sys.executable),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    stdout, stderr = proc.communicate(AGENT_SOURCE, timeout=timeout)
    elapsed = time.monotonic() - started
    result = parse_agent_output(stdout, stderr)
    return AgentRun(result, stdout, stderr, proc.returncode, elapsed, proc.pid)


def agent(command: str, args: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    run = run_agent(command, args, **kwargs)
    assert run.returncode == 0, run.stderr
    return run.result


def wait_for(predicate: Callable[[], Any], *, timeout: float = 30, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rsplit(")", 1)[1].split()


def start_time(pid: int) -> int:
    fields = stat_fields(pid)
    assert fields is not None, f"pid {pid} is gone"
    return int(fields[19])


def ppid_of(pid: int) -> int:
    fields = stat_fields(pid)
    assert fields is not None, f"pid {pid} is gone"
    return int(fields[1])


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def environ(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")


def pids_with_marker(run_id: str) -> list[int]:
    entry = f"SPECDASH_RUN_ID={run_id}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            entries = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if entry in entries:
            found.append(int(name))
    return found


def kill_quietly(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
