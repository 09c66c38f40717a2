from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import (
    FAKE_ENGINE,
    FAKE_NVIDIA_SMI,
    HOLDER,
    agent,
    kill_quietly,
    pids_with_marker,
    read_json,
    wait_for,
)


class Lab:
    """What one test starts: run ids (killed by marker at teardown) and helper processes."""

    def __init__(self, tmp: Path, name: str) -> None:
        self.tmp = tmp
        self.name = name
        self.run_ids: list[str] = []
        self.helpers: list[subprocess.Popen[bytes]] = []

    def run_id(self) -> str:
        run_id = f"t-{uuid.uuid4().hex[:10]}"
        self.run_ids.append(run_id)
        return run_id

    def launch_engine(self, *engine_args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
        """Launch the fake engine through the agent and return the launch answer + state dir."""
        run_id = self.run_id()
        state = self.tmp / f"state-{run_id}"
        state.mkdir()
        result = agent(
            "launch",
            {
                "run_id": run_id,
                "argv": [sys.executable, str(FAKE_ENGINE), "--state-dir", str(state), *engine_args],
                "env": env or {},
                "workdir": str(self.tmp),
                "run_dir": str(self.tmp / f"run-{run_id}"),
            },
        )
        assert result["ok"], result
        result["state_dir"] = state
        return result

    def wait_engine(
        self, launched: dict[str, Any], workers: int, escaped: bool = False
    ) -> dict[str, Any]:
        state: Path = launched["state_dir"]
        names = ["parent"] + [f"worker-{i}" for i in range(workers)]
        if escaped:
            names = [n for n in names if n != "worker-0"] + ["escaped"]

        def all_there() -> dict[str, Any] | None:
            infos = {n: read_json(state / f"{n}.json") for n in names}
            return infos if all(infos.values()) else None

        return wait_for(all_there, timeout=60, what=f"fake engine in {state}")

    def helper(self, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
        """Start holder.py (no marker, not through the agent); returns (pid, ready text)."""
        ready = self.tmp / f"ready-{uuid.uuid4().hex[:8]}"
        proc = subprocess.Popen(
            [sys.executable, str(HOLDER), *args, str(ready)],
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
        self.helpers.append(proc)
        wait_for(ready.exists, timeout=30, what="holder ready")
        return proc.pid, ready.read_text()

    def fake_nvidia_smi(self, gpus: list[dict[str, int]], app_pids: list[int]) -> dict[str, str]:
        """Put a fake nvidia-smi first on PATH; returns the agent's environment."""
        bindir = self.tmp / "bin"
        bindir.mkdir(exist_ok=True)
        self.gpu_state = bindir / "gpu-state.json"
        self.set_gpus(gpus, app_pids)
        script = bindir / "nvidia-smi"
        script.write_text(
            f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_NVIDIA_SMI}" "{self.gpu_state}" "$@"\n'
        )
        script.chmod(0o755)
        return {**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}"}

    def set_gpus(self, gpus: list[dict[str, int]], app_pids: list[int]) -> None:
        self.gpu_state.write_text(json.dumps({"gpus": gpus, "app_pids": app_pids}))

    def nvidia_smi_calls(self) -> list[list[str]]:
        calls = Path(f"{self.gpu_state}.calls")
        if not calls.exists():
            return []
        return [json.loads(line) for line in calls.read_text().splitlines()]

    def cleanup(self) -> None:
        for run_id in self.run_ids:
            for pid in pids_with_marker(run_id):
                kill_quietly(pid)
        for proc in self.helpers:
            kill_quietly(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.fixture
def lab(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Lab]:
    lab = Lab(tmp_path, request.node.name)
    try:
        yield lab
    finally:
        lab.cleanup()
