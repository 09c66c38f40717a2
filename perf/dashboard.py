"""A real ``manage.py serve`` (Daphne + in-process job worker) as a subprocess, for whatever
drives the dashboard from outside: the benchmark scripts, and the tests' browser, API client
and CLI (``tests/fixtures/dashboard.py`` re-exports ``serving``). Django-free: it runs
``manage.py`` and talks HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


class DashboardDidNotStart(RuntimeError):
    """The server exited, or its login page did not answer in time; the message ends with
    the tail of its log."""


@contextmanager
def serving(
    *,
    env: dict[str, str],
    port: int,
    log_path: Path,
    start_timeout: float = 60.0,
    stop_timeout: float = 30.0,
    exit_with_parent: bool = False,
) -> Iterator[str]:
    """Serve on 127.0.0.1:port until the block ends; yields the base URL once the login page
    answers. A server that exits or does not answer within ``start_timeout`` seconds raises
    DashboardDidNotStart with its log. Its process group is ended on the way out (SIGTERM,
    then SIGKILL after ``stop_timeout`` seconds), also when the block fails.
    ``exit_with_parent``: the server also shuts down should this process die without ending
    the block (``serve --exit-with-parent``)."""
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "manage.py", "serve", "--port", str(port)]
    if exit_with_parent:
        command.append("--exit-with-parent")
    with log_path.open("w") as log:
        server = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + start_timeout
            while True:
                try:
                    if httpx.get(url + "/accounts/login/", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text()[-3000:]
                    raise DashboardDidNotStart("the dashboard did not start:\n" + tail)
                time.sleep(0.2)
            yield url
        finally:
            _end(server, stop_timeout)


def _end(server: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the server's group, SIGKILL after ``grace`` s; a group already gone (a
    server that exited at start, its children with it) is no error: the caller's is raised."""
    try:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
    except ProcessLookupError:
        pass
    server.wait()
