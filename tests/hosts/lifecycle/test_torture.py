"""The lifecycle torture: the 15 cases of the reference list of server lifecycle failures and
two of the dashboard's own database (full then freed, a read-only var dir),
tried as an operator would, through the REST API of a real dashboard (``manage.py serve``:
Daphne with its job worker) that is itself SIGKILLed and restarted in case 13. Servers are
the simulator's real processes; GPUs are the simulator's (a ledger of device files and
memory read through its nvidia-smi stand-in). Case 9 and 10 go through real loopback sshds;
cases 16 and 17 start dashboards of their own, on a small tmpfs and a read-only bind mount
(root). Prints a table case -> outcome; every case must survive. ``make torture`` runs it alone.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.procs import alive
from tests.fixtures.sshd import SshServer
from tests.hosts.lifecycle.conftest import (
    FIXTURE_BIN,
    ROOT,
    SIM_BIN,
    STOPPED_CT,
    free_port,
    gpu_used_mb,
    marker_pids,
    ssh_master_pids,
)

# Fifteen cases, a dashboard restart and a sweep: minutes, not the default two.
pytestmark = [pytest.mark.sshd, pytest.mark.timeout(600)]

PASSWORD = "torture-pass-123"
ENDED = ("stopped", "failed", "crashed", "dirty", "lost")
# Simulated parts, said in the table: GPUs are the simulator's ledger and nvidia-smi stand-in.
SIMULATED_GPU = "sim GPU"


@dataclass
class Board:
    """A dashboard subprocess over one database, restartable, driven through its API."""

    var: Path
    port: int
    env: dict[str, str]
    token: str = ""
    proc: subprocess.Popen[bytes] | None = None
    log: Any = None
    # Where serve.log goes (default: the var dir; elsewhere when the var dir is to be filled).
    log_dir: Path | None = None

    @property
    def log_path(self) -> Path:
        return (self.log_dir or self.var) / "serve.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True,
            text=True, timeout=180,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def start(self) -> None:
        self.log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(self.port)],
            cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/accounts/login/", timeout=2).status_code == 200:
                    return
            assert self.proc.poll() is None, self.log_path.read_text()[-3000:]
            assert time.monotonic() < deadline, "the dashboard did not start"
            time.sleep(0.2)

    def sigkill(self) -> None:
        """Only the dashboard process, as `kill -9 <pid>` does: what it started lives on."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)

    def shutdown(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        if self.log is not None:
            self.log.close()

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        return httpx.request(
            method, f"{self.url}/api/v1{path}", json=body, timeout=60,
            headers={"Authorization": f"Bearer {self.token}"},
        )  # fmt: skip

    def ok(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        response = self.api(method, path, body)
        assert response.status_code in (200, 201, 202), (path, response.status_code, response.text)
        return response.json()

    def instance(self, instance_id: int) -> dict[str, Any]:
        return dict(self.ok("GET", f"/instances/{instance_id}"))

    def wait(self, instance_id: int, *states: str, timeout: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            found = self.instance(instance_id)
            if found["state"] in states:
                return found
            assert time.monotonic() < deadline, (
                f"instance {instance_id} is {found['state']}, not {states}: {found['reason']}"
            )
            time.sleep(0.2)

    def events(self, instance_id: int) -> list[str]:
        page = self.ok("GET", f"/instances/{instance_id}/events?limit=200")
        return [e["message"] for e in page["items"]]

    def start_profile(self, profile_id: int) -> dict[str, Any]:
        return dict(self.ok("POST", f"/profiles/{profile_id}/start")["instance"])

    def stop(self, instance_id: int) -> None:
        self.ok("POST", f"/instances/{instance_id}/stop")


@dataclass
class Lab:
    board: Board
    state: Path  # the simulated GPUs
    host_id: int = 0
    names: Iterator[int] = field(default_factory=lambda: iter(range(1000)))

    def profile(
        self, *sim: str, gpus: tuple[int, ...] = (0,), port: int | None = None,
        host_id: int | None = None, argv: list[str] | None = None, **fields: Any,
    ) -> int:  # fmt: skip
        port = port or free_port()
        if argv is None:
            argv = [
                sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1",
                "--port", str(port), "--profile", "fast", "--gpus", ",".join(map(str, gpus)),
                "--workers", str(len(gpus)), "--gpu-memory-gb", "10", *sim,
            ]  # fmt: skip
        body = {
            "name": f"torture {next(self.names)}", "engine": "simulator",
            "host_id": host_id or self.host_id, "launch_argv": argv,
            "env": {"SPECDASH_SIM_STATE_DIR": str(self.state), "SPECDASH_SIM_GPU_COUNT": "4"},
            "workdir": str(ROOT), "port": port, "gpu_ids": list(gpus),
            "readiness_timeout_s": 60, "served_model_name": "specdash-sim", "stop_grace_s": 2,
            **fields,
        }  # fmt: skip
        return int(self.board.ok("POST", "/profiles", body)["id"])

    def ready(self, profile_id: int) -> dict[str, Any]:
        started = self.board.start_profile(profile_id)
        ready = self.board.wait(started["id"], "ready", *ENDED)
        assert ready["state"] == "ready", ready["reason"]
        return ready

    def stopped(self, instance_id: int) -> dict[str, Any]:
        self.board.stop(instance_id)
        final = self.board.wait(instance_id, *ENDED)
        assert final["state"] == "stopped", (final["reason"], final["evidence"])
        return final

    def gpus(self) -> dict[int, int]:
        return gpu_used_mb(self.state)


def _none_alive(run_id: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while [p for p in marker_pids(run_id) if alive(p)]:
        assert time.monotonic() < deadline, f"processes of {run_id} survive"
        time.sleep(0.1)


def _bystander(*extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", *extra])


def _ledger_entry(state: Path, pid: int, gpu: int, mib: int) -> None:
    stat = Path(f"/proc/{pid}/stat").read_text()
    entry = {"pid": pid, "start_time": int(stat.rsplit(")", 1)[1].split()[19]), "role": "other",
             "memory_mib": {str(gpu): mib}, "utilization": {}, "updated": 0}  # fmt: skip
    (state / "ledger" / f"{pid}.json").write_text(json.dumps(entry))


# ----------------------------------------------------------------------------- the cases


def case_1_bad_start(lab: Lab) -> str:
    before = lab.gpus()
    oom = lab.board.start_profile(lab.profile("--fail-oom-at-start"))
    failed = lab.board.wait(oom["id"], *ENDED)
    log = lab.board.ok("GET", f"/instances/{oom['id']}/log")["lines"]
    assert failed["state"] == "failed" and failed["exit_code"] == 1, failed
    assert any("out of memory" in line.lower() for line in log), log
    missing = lab.board.start_profile(lab.profile(argv=["/nonexistent/sglang-server"]))
    refused = lab.board.wait(missing["id"], *ENDED)
    assert refused["state"] == "failed" and "binary not found" in refused["reason"], refused
    assert lab.gpus() == before
    return "OOM: failed, exit code 1, log tail shown; missing binary: refused by preflight"


def case_2_port_taken(lab: Lab) -> str:
    with socket.socket() as listening, socket.socket() as bound:
        # Ports the kernel picks are safe here: both sockets hold theirs for the whole case.
        listening.bind(("127.0.0.1", 0))
        listening.listen(4)
        bound.bind(("127.0.0.1", 0))  # a server still loading: bound, not listening
        outcomes = []
        for sock in (listening, bound):
            port = sock.getsockname()[1]
            started = lab.board.start_profile(lab.profile(port=port))
            failed = lab.board.wait(started["id"], *ENDED)
            assert failed["state"] == "failed", failed
            assert f"port {port} is taken" in failed["reason"], failed["reason"]
            assert f"pid {os.getpid()}" in failed["reason"], failed["reason"]  # the holder named
            outcomes.append(failed["reason"].split("(")[1].split(")")[0])
    return f"refused by preflight naming the holder ({'; '.join(outcomes)})"


def case_3_readiness_timeout(lab: Lab) -> str:
    before = lab.gpus()
    started = lab.board.start_profile(
        lab.profile("--load-seconds", "60", gpus=(1,), readiness_timeout_s=3)
    )
    failed = lab.board.wait(started["id"], *ENDED)
    assert failed["state"] == "failed" and failed["reason"].startswith("Not ready after 3 s")
    _none_alive(failed["run_id"])
    assert lab.gpus() == before
    return "failed 'Not ready after 3 s', verified kill: no process left, GPU memory back"


def case_4_parent_sigkilled(lab: Lab) -> str:
    before = lab.gpus()
    ready = lab.ready(lab.profile("--fault-orphan-workers", gpus=(0, 1)))
    workers = [p for p in marker_pids(ready["run_id"]) if p != ready["pid"]]
    os.kill(ready["pid"], signal.SIGKILL)
    crashed = lab.board.wait(ready["id"], "crashed", "dirty", "lost")
    assert crashed["state"] == "crashed", crashed
    _none_alive(ready["run_id"])
    deadline = time.monotonic() + 30
    while lab.gpus() != before:
        assert time.monotonic() < deadline, "GPU memory not released after the crash clean-up"
        time.sleep(0.2)
    return f"crashed (SIGKILL); {len(workers)} re-parented workers found by marker and killed"


def case_5_7_8_ignore_sigterm_bystanders(lab: Lab) -> str:
    before = lab.gpus()
    ready = lab.ready(lab.profile("--fault-ignore-sigterm", gpus=(2,), stop_grace_s=1))
    unrelated = _bystander()  # case 7: a python3 of someone else's in the same "container"
    listed = _bystander()  # case 8: a pid nvidia-smi lists on the instance's GPU
    try:
        _ledger_entry(lab.state, listed.pid, gpu=2, mib=1)
        apps = subprocess.run(
            [str(SIM_BIN / "nvidia-smi"), "--query-compute-apps=pid", "--format=csv,noheader"],
            env={**os.environ, "SPECDASH_SIM_STATE_DIR": str(lab.state)}, capture_output=True,
            text=True, check=True,
        ).stdout.split()  # fmt: skip
        assert str(listed.pid) in apps
        final = lab.stopped(ready["id"])
        stop = final["evidence"]["stop"]
        assert stop["killed"], stop  # SIGTERM ignored: escalated after the 1 s grace
        assert alive(unrelated.pid) and alive(listed.pid)
        (lab.state / "ledger" / f"{listed.pid}.json").unlink()
    finally:
        for proc in (unrelated, listed):
            proc.kill()
            proc.wait()
    assert lab.gpus() == before
    return (
        f"stopped; {len(stop['killed'])} SIGKILLed after the 1 s grace; unrelated python3 and "
        "the pid nvidia-smi listed both untouched"
    )


def case_6_setsid_workers(lab: Lab) -> str:
    before = lab.gpus()
    ready = lab.ready(lab.profile("--fault-setsid-workers", gpus=(3,)))
    members = marker_pids(ready["run_id"])
    sessions = {Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[3] for p in members}
    assert len(sessions) > 1, "the workers should have left the server's session"
    lab.stopped(ready["id"])
    _none_alive(ready["run_id"])
    assert lab.gpus() == before
    return f"stopped; workers in {len(sessions) - 1} other session(s) found by marker"


def case_9_ssh_drop(lab: Lab, sshd: SshServer) -> str:
    host = lab.board.ok("POST", "/hosts", {
        "name": "over ssh", "kind": "ssh", "address": sshd.host, "ssh_user": sshd.user,
        "ssh_port": sshd.port, "identity_file": str(sshd.identity_file),
        "known_hosts_file": str(sshd.known_hosts_file), "path_prepend": str(SIM_BIN),
        "command_env": {"SPECDASH_SIM_STATE_DIR": str(lab.state), "SPECDASH_SIM_GPU_COUNT": "4"},
    })  # fmt: skip
    before = lab.gpus()
    ready = lab.ready(
        lab.profile("--fault-ignore-sigterm", gpus=(0,), host_id=host["id"], stop_grace_s=3)
    )
    lab.board.stop(ready["id"])
    deadline = time.monotonic() + 30
    while not _far_side("stop", ready["run_id"]):
        assert time.monotonic() < deadline, "the stop never reached the far side"
        time.sleep(0.05)
    masters = ssh_master_pids(lab.board.var / "ssh-control")
    assert masters
    for pid in masters:
        os.kill(pid, signal.SIGKILL)
    final = lab.board.wait(ready["id"], *ENDED)
    assert final["state"] == "stopped", (final["reason"], final["evidence"])
    _none_alive(ready["run_id"])
    assert lab.gpus() == before
    return "ssh master killed mid-stop: the stop was retried and verified (launch: see tests)"


def _holds(pid: int, device: Path) -> bool:
    with contextlib.suppress(OSError):
        return any(os.readlink(fd) == str(device) for fd in Path(f"/proc/{pid}/fd").iterdir())
    return False


def _far_side(command: str, run_id: str) -> bool:
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                if command.encode() in argv and run_id.encode() in b" ".join(argv):
                    return True
    return False


def case_10_container_hops(lab: Lab, pve: SshServer) -> str:
    node = lab.board.ok("POST", "/hosts", {
        "name": "pve node", "kind": "ssh", "address": pve.host, "ssh_user": pve.user,
        "ssh_port": pve.port, "identity_file": str(pve.identity_file),
        "known_hosts_file": str(pve.known_hosts_file), "path_prepend": str(SIM_BIN),
    })  # fmt: skip
    reasons = []
    for ident, expect in ((STOPPED_CT, "is not running"), ("999", "does not exist")):
        ct = lab.board.ok(
            "POST", "/containers", {"host_id": node["id"], "kind": "pct", "ident": ident}
        )
        started = lab.board.start_profile(
            lab.profile(host_id=node["id"], container_id=ct["id"], gpus=())
        )
        failed = lab.board.wait(started["id"], *ENDED)
        assert failed["state"] == "failed", failed
        assert f"hop 2 (pct exec {ident}" in failed["reason"] and expect in failed["reason"]
        reasons.append(f"CT {ident}: hop 2 ... {expect}")
    return "failed naming the hop: " + "; ".join(reasons)


def case_11_gpu_not_released(lab: Lab) -> str:
    before = lab.gpus()
    ready = lab.ready(lab.profile(gpus=(1,)))
    device = lab.state / "dev" / "nvidia1"
    holder = subprocess.Popen([sys.executable, "-c",
        "import os, sys, time; fd = os.open(sys.argv[1], os.O_RDONLY); time.sleep(600)", str(device)])  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not _holds(holder.pid, device):
            assert time.monotonic() < deadline, "the holder never opened the device file"
            time.sleep(0.05)
        _ledger_entry(lab.state, holder.pid, gpu=1, mib=4000)
        lab.board.stop(ready["id"])
        dirty = lab.board.wait(ready["id"], *ENDED)
        assert dirty["state"] == "dirty", dirty
        listed = [h for h in dirty["evidence"]["holders"] if h["counts"]]
        assert [h["pid"] for h in listed] == [holder.pid], dirty["evidence"]["holders"]
        chosen = [{"pid": h["pid"], "start_time": h["start_time"]} for h in listed]
        unconfirmed = lab.board.api(
            "POST", f"/instances/{ready['id']}/kill-holders", {"holders": chosen, "confirm": False}
        )
        assert unconfirmed.status_code == 422 and alive(holder.pid)
        lab.board.ok(
            "POST", f"/instances/{ready['id']}/kill-holders", {"holders": chosen, "confirm": True}
        )
        deadline = time.monotonic() + 60
        while (final := lab.board.instance(ready["id"]))["state"] != "stopped":
            assert time.monotonic() < deadline, (final["reason"], final["evidence"].get("port"))
            time.sleep(0.2)
        holder.wait(timeout=10)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert lab.gpus() == before
    return "dirty listing its one fd holder; kill refused unconfirmed, then confirmed: stopped"


def case_12_crash_mid_sweep(lab: Lab) -> str:
    before = lab.gpus()
    ready = lab.ready(
        lab.profile("--crash-after-requests", "30", "--fault-orphan-workers", gpus=(2, 3))
    )
    load = {"api": "completions", "requests_per_level": 20, "max_tokens": 4, "input_tokens": 8,
            "warmup_requests": 0}  # fmt: skip
    sweep = lab.board.ok("POST", "/sweeps", {"instance_id": ready["id"], "levels": [1, 2, 5],
                                             "load": load})["sweep"]  # fmt: skip
    deadline = time.monotonic() + 120
    while (found := lab.board.ok("GET", f"/sweeps/{sweep['id']}"))["state"] in (
        "queued",
        "running",
    ):
        assert time.monotonic() < deadline, "the sweep did not end"
        time.sleep(0.3)
    assert found["state"] == "failed" and found["reason"].startswith("server crashed mid-sweep")
    levels = lab.board.ok("GET", f"/sweeps/{sweep['id']}/levels")
    counted = [lv for lv in levels if lv["state"] == "completed"]
    assert counted and all(lv["requests_failed"] == 0 for lv in counted), levels
    crashed = lab.board.wait(ready["id"], "crashed", "dirty")
    assert crashed["state"] == "crashed", crashed
    _none_alive(ready["run_id"])
    deadline = time.monotonic() + 30
    while lab.gpus() != before:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    states = ", ".join(f"C={lv['concurrency']} {lv['state']}" for lv in levels)
    return f"sweep failed 'server crashed mid-sweep' ({states}); server cleaned up"


def case_13_dashboard_restarts(lab: Lab) -> tuple[str, dict[str, Any]]:
    before = lab.gpus()
    running = lab.ready(lab.profile(gpus=(0, 1)))
    launching = lab.board.start_profile(lab.profile(gpus=(2,)))
    deadline = time.monotonic() + 60
    while not marker_pids(launching["run_id"]):  # it carries SPECDASH_RUN_ID now
        assert time.monotonic() < deadline, "the second server was never launched"
        time.sleep(0.02)
    lab.board.sigkill()
    lab.board.start()
    adopted = lab.board.wait(launching["id"], "ready", *ENDED, timeout=120)
    assert adopted["state"] == "ready", (adopted["reason"], adopted["evidence"])
    deadline = time.monotonic() + 60
    while "Re-adopted after a dashboard restart" not in lab.board.events(running["id"]):
        assert time.monotonic() < deadline, lab.board.events(running["id"])
        time.sleep(0.3)
    assert lab.board.instance(running["id"])["state"] == "ready"
    lab.stopped(adopted["id"])
    _none_alive(launching["run_id"])
    assert {k: v for k, v in lab.gpus().items() if k == 2} == {2: before[2]}
    found = "found by marker" if any(
        "by marker" in m for m in lab.board.events(launching["id"])
    ) else "its launch was recorded before the kill"  # fmt: skip
    return (
        f"SIGKILLed: ready server re-adopted; server mid-launch adopted ({found}); both stop",
        running,
    )


def case_14_two_operators(lab: Lab) -> str:
    port = free_port()
    first, second = lab.profile(port=port, gpus=(3,)), lab.profile(port=port, gpus=(2,))
    answers: list[httpx.Response] = []
    go = threading.Barrier(2)

    def press(profile_id: int) -> None:
        go.wait()
        answers.append(lab.board.api("POST", f"/profiles/{profile_id}/start"))

    threads = [threading.Thread(target=press, args=(p,)) for p in (first, second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    codes = sorted(a.status_code for a in answers)
    assert codes == [202, 409], [a.text for a in answers]
    refused = next(a for a in answers if a.status_code == 409).json()["error"]
    assert f"Port {port}" in refused["message"], refused
    winner = next(a for a in answers if a.status_code == 202).json()["instance"]
    lab.board.stop(winner["id"])
    final = lab.board.wait(winner["id"], *ENDED)
    assert final["state"] in ("stopped", "failed"), final
    return "one 202, one 409: " + refused["message"]


def case_15_counter_reset_and_ranks(lab: Lab, ready: dict[str, Any]) -> str:
    from hosts.telemetry.deltas import interval_between
    from hosts.telemetry.prometheus import parse_engine_metrics

    def scrape(url: str) -> Any:
        text = httpx.get(url + "/metrics", timeout=10).text
        return parse_engine_metrics(text, scraped_at=time.time())

    def generate(url: str, n: int) -> int:
        tokens = 0
        for _ in range(n):
            body = {"model": "specdash-sim", "prompt": "hello", "max_tokens": 8}
            answer = httpx.post(url + "/v1/completions", json=body, timeout=30).json()
            tokens += int(answer["usage"]["completion_tokens"])
        return tokens

    url = f"http://127.0.0.1:{ready['port']}"
    first = scrape(url)
    sent = generate(url, 5)
    second = scrape(url)
    grown = interval_between(first, second)
    # Two GPUs: every counter is exported once per tp rank; the totals must not double.
    assert grown.generation_tokens == sent, (grown.generation_tokens, sent)
    lab.stopped(ready["id"])
    again = lab.ready(lab.board.instance(ready["id"])["profile_id"])
    generate(url, 1)  # the same profile: the same port
    after_restart = interval_between(second, scrape(url))
    assert after_restart.reset is True
    assert after_restart.generation_tokens is not None and after_restart.generation_tokens >= 0
    lab.stopped(again["id"])
    return (
        f"{sent} tokens counted once over 2 tp ranks; restart seen as a reset "
        f"({after_restart.generation_tokens:g} tokens since, never negative)"
    )


# ----------------------------------------------------------------------------- the database


def _mount(*args: str) -> None:
    if os.geteuid() != 0:
        raise RuntimeError("needs root: the case mounts a small or read-only filesystem")
    subprocess.run(["mount", *args], check=True, capture_output=True)


def _second_board(board: Board, var: Path, logs: Path) -> Board:
    """A dashboard of its own over a database in ``var`` (the runs and the log elsewhere)."""
    env = {**board.env, "SPECDASH_VAR_DIR": str(var), "SPECDASH_RUN_ROOT": str(logs / "runs")}
    other = Board(var=var, port=free_port(), env=env, log_dir=logs)
    other.manage("migrate", "--no-input", "-v", "0")
    other.manage("seed_demo")
    other.token = other.manage("specdash", "token", "--user", "operator", "--name", "t").strip()
    return other


def _fill(path: Path) -> int:
    """Write ballast into ``path`` until its filesystem is full; the bytes written."""
    written = 0
    fd = os.open(path / "ballast", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for chunk in (1 << 20, 4096, 512):
            block = b"\0" * chunk
            while True:
                try:
                    written += os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
        os.fsync(fd)
    finally:
        os.close(fd)
    return written


def _health(board: Board) -> dict[str, Any]:
    return dict(board.ok("GET", "/health"))


def _until_health(board: Board, ok: bool, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while (found := _health(board))["ok"] is not ok:
        assert time.monotonic() < deadline, (ok, found, board.log_path.read_text()[-2000:])
        time.sleep(0.3)
    return found


def case_16_database_full_then_freed(lab: Lab) -> str:
    var = Path(tempfile.mkdtemp(prefix="sdt-full-", dir="/tmp"))
    logs = Path(tempfile.mkdtemp(prefix="sdt-full-logs-", dir="/tmp"))
    _mount("-t", "tmpfs", "-o", "size=48m", "tmpfs", str(var))
    board: Board | None = None
    try:
        # seed_demo's tiny GGUF models (57 MiB) live beside the log, not on the small disk.
        (logs / "models").mkdir()
        (var / "models").symlink_to(logs / "models")
        board = _second_board(lab.board, var, logs)
        board.start()
        host = board.ok("POST", "/hosts", {
            "name": "sim", "kind": "local", "path_prepend": str(SIM_BIN),
            "command_env": {"SPECDASH_SIM_STATE_DIR": str(lab.state),
                            "SPECDASH_SIM_GPU_COUNT": "4"},
        })  # fmt: skip
        other = Lab(board=board, state=lab.state, host_id=int(host["id"]))
        before = lab.gpus()
        ready = other.ready(other.profile(gpus=(3,)))
        # The WAL emptied into the database while there is room, then the disk filled: the
        # next write that needs a page fails "database or disk is full".
        with contextlib.closing(sqlite3.connect(var / "specdash.sqlite3", timeout=20)) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        ballast = _fill(var)
        down = _until_health(board, False, 30)
        start_body = board.api("POST", f"/profiles/{ready['profile_id']}/start")
        assert start_body.status_code == 503, start_body.text
        assert start_body.json()["error"]["code"] == "worker_unavailable", start_body.text
        stop_during = board.api("POST", f"/instances/{ready['id']}/stop")
        # A stop is a write: it is accepted if it still fits, else refused with the reason.
        assert stop_during.status_code in (202, 503), stop_during.text
        if stop_during.status_code == 503:
            assert stop_during.json()["error"]["code"] == "database_unavailable"
            assert "full" in stop_during.json()["error"]["message"], stop_during.text
        page = httpx.get(board.url + "/accounts/login/", timeout=30)
        assert page.status_code == 200, page.status_code
        time.sleep(3)  # the worker keeps failing, with back-off, and stays alive
        assert board.proc is not None and board.proc.poll() is None
        (var / "ballast").unlink()
        _until_health(board, True, 60)
        log = board.log_path.read_text()
        assert "its loop failed" in log and "database or disk is full" in log, log[-3000:]
        assert "recovered after" in log, log[-3000:]
        if stop_during.status_code == 503:
            board.stop(ready["id"])
        final = board.wait(ready["id"], *ENDED, timeout=120)
        assert final["state"] == "stopped", (final["reason"], final["evidence"])
        _none_alive(ready["run_id"])
        assert {k: v for k, v in lab.gpus().items() if k == 3} == {3: before[3]}
        said = down["message"].split(". ")[0]
        during = "stop accepted" if stop_during.status_code == 202 else "stop 503 (not recorded)"
        return (
            f"{ballast >> 20} MiB ballast: health down ('{said}'), start 503, {during}, "
            "login page 200; freed: worker recovered by itself, server stopped, GPU back"
        )
    finally:
        if board is not None:
            with contextlib.suppress(Exception):
                for pid in marker_pids_of_board(board):
                    os.kill(pid, signal.SIGKILL)
            board.shutdown()
        subprocess.run(["umount", "-l", str(var)], check=False)
        shutil.rmtree(var, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)


def marker_pids_of_board(board: Board) -> list[int]:
    run_ids = {i["run_id"] for i in board.ok("GET", "/instances?limit=200")["items"]}
    return [p for r in run_ids for p in marker_pids(r)]


def case_17_read_only_var_dir(lab: Lab) -> str:
    var = Path(tempfile.mkdtemp(prefix="sdt-ro-", dir="/tmp"))
    logs = Path(tempfile.mkdtemp(prefix="sdt-ro-logs-", dir="/tmp"))
    board = _second_board(lab.board, var, logs)
    _mount("--bind", str(var), str(var))
    try:
        _mount("-o", "remount,bind,ro", str(var))
        said = []
        for command in (["serve", "--port", str(board.port)], ["jobworker"]):
            done = subprocess.run(
                [sys.executable, "manage.py", *command], cwd=ROOT, env=board.env,
                capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert done.returncode != 0, (command, done.stdout, done.stderr)
            assert "specdash is at" not in done.stdout
            wanted = f"cannot write to the var dir (SPECDASH_VAR_DIR) {var}: Read-only file system"
            assert wanted in done.stderr, done.stderr
            assert "Traceback" not in done.stderr, done.stderr
            said.append(command[0])
        with pytest.raises(httpx.ConnectError):
            httpx.get(board.url + "/accounts/login/", timeout=5)
        _mount("-o", "remount,bind,rw", str(var))
        board.start()
        healthy = _until_health(board, True, 30)
        return (
            f"{' and '.join(said)} refused to start: 'cannot write to the var dir ... Read-only "
            f"file system', nothing listening; writable again: starts, {healthy['message']}"
        )
    finally:
        board.shutdown()
        subprocess.run(["umount", "-l", str(var)], check=False)
        shutil.rmtree(var, ignore_errors=True)
        shutil.rmtree(logs, ignore_errors=True)


# ----------------------------------------------------------------------------- the run


@pytest.fixture
def board() -> Iterator[Board]:
    # A short directory: the ssh control sockets live under it (108-byte socket paths).
    var = Path(tempfile.mkdtemp(prefix="sdt-", dir="/tmp"))
    env = {
        **os.environ, "SPECDASH_VAR_DIR": str(var), "SPECDASH_RUN_ROOT": str(var / "runs"),
        "SPECDASH_DEMO_PASSWORD": PASSWORD, "PYTHONUNBUFFERED": "1",
        # A SIGKILLed dashboard's jobs are taken over once their lease expires.
        "SPECDASH_JOB_LEASE_S": "4", "SPECDASH_JOB_HEARTBEAT_S": "1",
    }  # fmt: skip
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("SPECDASH_TOKEN", None)
    board = Board(var=var, port=free_port(), env=env)
    board.manage("migrate", "--no-input", "-v", "0")
    board.manage("seed_demo")
    board.token = board.manage("specdash", "token", "--user", "operator", "--name", "t").strip()
    board.start()
    try:
        yield board
    finally:
        with contextlib.suppress(Exception):
            run_ids = {i["run_id"] for i in board.ok("GET", "/instances?limit=200")["items"]}
            for pid in [p for r in run_ids for p in marker_pids(r)]:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        board.shutdown()
        for pid in ssh_master_pids(var / "ssh-control"):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGTERM)


def test_the_lifecycle_torture_every_case_survives(
    board: Board, sim_state: Path, sshd: SshServer, pve_sshd: SshServer,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    host = board.ok("POST", "/hosts", {
        "name": "sim", "kind": "local", "path_prepend": str(SIM_BIN),
        "command_env": {"SPECDASH_SIM_STATE_DIR": str(sim_state), "SPECDASH_SIM_GPU_COUNT": "4"},
    })  # fmt: skip
    lab = Lab(board=board, state=sim_state, host_id=int(host["id"]))
    assert FIXTURE_BIN.is_dir()
    table: list[tuple[str, str, str, float]] = []
    restart: dict[str, Any] = {}

    def run(case: str, how: str, step: Callable[[], str]) -> None:
        began = time.monotonic()
        try:
            outcome = "survived: " + step()
        except Exception as exc:  # the table shows every case; the test fails after it
            outcome = f"FAILED: {type(exc).__name__}: {str(exc)[:300]}"
        table.append((case, how, outcome, time.monotonic() - began))

    def thirteen() -> str:
        text, running = case_13_dashboard_restarts(lab)
        restart["running"] = running
        return text

    run("1 bad path / missing binary / OOM", SIMULATED_GPU, lambda: case_1_bad_start(lab))
    run("2 port taken", "real", lambda: case_2_port_taken(lab))
    run(
        "3 loading past the readiness timeout", SIMULATED_GPU, lambda: case_3_readiness_timeout(lab)
    )
    run(
        "4 parent SIGKILLed, workers re-parented",
        SIMULATED_GPU,
        lambda: case_4_parent_sigkilled(lab),
    )
    run("5+7+8 SIGTERM ignored; bystanders", SIMULATED_GPU + "; nvidia-smi pids simulated",
        lambda: case_5_7_8_ignore_sigterm_bystanders(lab))  # fmt: skip
    run("6 setsid / double-forked workers", SIMULATED_GPU, lambda: case_6_setsid_workers(lab))
    run(
        "9 ssh drops during stop", "real sshd; " + SIMULATED_GPU, lambda: case_9_ssh_drop(lab, sshd)
    )
    run("10 container stopped / missing", "real sshd; pct stand-in",
        lambda: case_10_container_hops(lab, pve_sshd))  # fmt: skip
    run("11 GPU memory not released", SIMULATED_GPU + " (ledger + device file)",
        lambda: case_11_gpu_not_released(lab))  # fmt: skip
    run("12 crash mid-sweep", SIMULATED_GPU, lambda: case_12_crash_mid_sweep(lab))
    run("13 dashboard SIGKILLed and restarted", "real dashboard; " + SIMULATED_GPU, thirteen)
    run("14 two operators, one port", "real", lambda: case_14_two_operators(lab))
    run("15 counter reset, tp-rank fan-out", "simulator's SGLang-style /metrics",
        lambda: case_15_counter_reset_and_ranks(lab, restart["running"]))  # fmt: skip
    run("16 database full then freed", "real tmpfs of 48 MiB; real dashboard; " + SIMULATED_GPU,
        lambda: case_16_database_full_then_freed(lab))  # fmt: skip
    run("17 read-only var dir", "real read-only bind mount; real serve and jobworker",
        lambda: case_17_read_only_var_dir(lab))  # fmt: skip

    with capsys.disabled():
        width = max(len(c) for c, *_ in table)
        print(f"\n{'case'.ljust(width)} | {'s':>5} | how | outcome")
        for case, how, outcome, seconds in table:
            print(f"{case.ljust(width)} | {seconds:5.1f} | {how} | {outcome}")
    failed = [row for row in table if row[2].startswith("FAILED")]
    assert not failed, failed
