"""The scaled layout as real processes: `manage.py serve --no-worker` web processes and
`manage.py jobworker` processes sharing one PostgreSQL database and one Redis channel layer."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "scaled-demo-pass-123"


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def tail(self, chars: int = 3000) -> str:
        """The log's end, and before it the first traceback when the end no longer shows it:
        a web process logs the exception behind a websocket's 1011 close, then goes on."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        head = f"--- {self.name} (pid {self.pid}, exit {self.process.poll()}) ---\n"
        first = text.find("Traceback")
        if 0 <= first < len(text) - chars:
            head += text[max(0, first - 500) : first + chars] + "\n[...]\n"
        return head + text[-chars:]


@dataclass
class Cluster:
    env: dict[str, str]
    var: Path
    procs: list[Proc] = field(default_factory=list)

    def manage(self, *args: str) -> str:
        # 150 s: under the 180 s of the shortest test that calls it (test_scaled_deployment),
        # so a hung command fails here, with its output, not in pytest-timeout's kill.
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env,
            capture_output=True, text=True, timeout=150,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {args[0]} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def _spawn(self, name: str, *args: str) -> Proc:
        log = self.var / f"{name}.log"
        with log.open("wb") as out:
            # Own session: the process and whatever it starts (load generators) form one
            # process group that teardown can signal, even after the leader was killed.
            process = subprocess.Popen(
                [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env,
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        proc = Proc(name=name, process=process, log=log)
        self.procs.append(proc)
        return proc

    def start_web(self, name: str, port: int) -> Proc:
        proc = self._spawn(name, "serve", "--no-worker", "--port", str(port))
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=2).is_success:
                    return proc
            if proc.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("web process did not start:\n" + proc.tail())
            time.sleep(0.2)

    def start_worker(self, name: str, *flags: str) -> Proc:
        """A worker, returned once it has beaten (the web processes refuse new work until a
        healthy worker has)."""
        proc = self._spawn(name, "jobworker", "--worker-id", name, *flags)
        deadline = time.monotonic() + 60
        while f"job worker {name} started" not in proc.log.read_text():
            if proc.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {name} did not start:\n" + proc.tail())
            time.sleep(0.2)
        return proc

    def logs(self) -> str:
        return "\n".join(p.tail() for p in self.procs)

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            # The group too: a load generator orphaned by a killed worker is still in it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.process.wait(timeout=10)


def children_running(pid: int, needle: str) -> list[int]:
    """Pids of the direct children of ``pid`` whose command line contains ``needle``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and needle in cmdline:
            found.append(int(entry))
    return found
