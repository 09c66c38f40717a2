"""`make run` as an operator uses it: a taken port is an error (non-zero, and no claim that
it serves), and killing `make` alone does not leave the dashboard running orphaned."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from tests.fixtures.ports import free_port
from tests.fixtures.procs import alive

ROOT = Path(settings.BASE_DIR)


def _env(var: Path) -> dict[str, str]:
    env = {**os.environ, "SPECDASH_VAR_DIR": str(var), "SPECDASH_RUN_ROOT": str(var / "runs"),
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(p) for p in path.read_text().split()]
    except OSError:
        return []


def test_serve_on_a_taken_port_exits_non_zero_without_claiming_it_serves(tmp_path: Path) -> None:
    with socket.socket() as taken:
        # The kernel's choice of port is safe here: the socket holds it while `serve` tries it.
        taken.bind(("127.0.0.1", 0))
        taken.listen(8)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "manage.py", "serve", "--port", str(port)],
            cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert done.returncode != 0
    assert "specdash is at" not in done.stdout
    assert f"cannot serve on 127.0.0.1:{port}: Address already in use" in done.stderr


def test_make_run_killed_alone_takes_the_dashboard_down_with_it(tmp_path: Path) -> None:
    port = free_port()
    # -o: the shared virtual environment is installed already; never reinstall it here.
    make = subprocess.Popen(
        ["make", "-s", "-o", ".venv/.runtime-installed", "run", f"PORT={port}"],
        cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    serve: int | None = None
    try:
        deadline = time.monotonic() + 180
        while True:
            assert make.poll() is None, make.stdout.read().decode() if make.stdout else ""
            try:
                if httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=2).is_success:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "make run did not serve"
            time.sleep(0.5)
        children = _children(make.pid)
        assert len(children) == 1, children  # exec: make's child is the dashboard itself
        serve = children[0]
        assert b"manage.py\0serve" in Path(f"/proc/{serve}/cmdline").read_bytes()

        os.kill(make.pid, signal.SIGKILL)
        make.wait(timeout=10)
        deadline = time.monotonic() + 60
        while alive(serve):
            assert time.monotonic() < deadline, "serve outlived make"
            time.sleep(0.2)
    finally:
        for pid in (serve, make.pid):
            if pid is not None and alive(pid):
                os.kill(pid, signal.SIGKILL)
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=2)
