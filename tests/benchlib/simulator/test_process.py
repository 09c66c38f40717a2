from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.fixtures.procs import alive, fd_targets

from .conftest import ROOT, cmdline, gpu_used, smi, wait_until

MiB_40G = 40 * 1024


@pytest.fixture(scope="module")
def server(module_sims):
    sim = module_sims.start(
        "--workers", "2", "--gpus", "0,1", "--truth-log", str(module_sims.base / "truth.jsonl")
    )
    return sim


def test_http_stream_matches_the_truth_log(server, module_sims):
    body = {
        "prompt": "hi",
        "max_tokens": 6,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = {"X-Request-Id": "e2e-1"}
    with (
        httpx.Client(timeout=10) as client,
        client.stream("POST", server.url("/v1/completions"), json=body, headers=headers) as resp,
    ):
        lines = [line for line in resp.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][6:])["usage"]["completion_tokens"] == 6
    truth = module_sims.base / "truth.jsonl"
    assert wait_until(lambda: "e2e-1" in truth.read_text(), 5)
    record = next(json.loads(x) for x in truth.read_text().splitlines() if "e2e-1" in x)
    assert [n for _, n in record["chunks"]] == [1] * 6
    assert abs(record["finish"] - time.time()) < 30  # epoch seconds


def test_workers_are_renamed_and_keep_the_environment_marker(server):
    workers = server.workers()
    assert sorted(cmdline(pid) for pid in workers) == [
        "sglang::scheduler_TP0",
        "sglang::scheduler_TP1",
    ]
    for pid in workers:
        with open(f"/proc/{pid}/environ", "rb") as f:
            assert f"SPECDASH_RUN_ID={server.marker}".encode() in f.read().split(b"\0")
    assert "benchlib.simulator" in cmdline(server.proc.pid)


def test_workers_hold_device_files_and_memory(server):
    holders = {}
    for pid in server.workers():
        for target in fd_targets(pid):
            if "/dev/nvidia" in target:
                holders[pid] = target
    assert sorted(t.rsplit("/", 1)[1] for t in holders.values()) == ["nvidia0", "nvidia1"]
    used = gpu_used(server.state_dir)
    assert used[0] == used[1] == MiB_40G and used[2] == 0
    apps = smi(
        server.state_dir,
        "--query-compute-apps=pid,process_name,used_memory",
        "--format=csv,noheader,nounits",
    )
    rows = sorted(line.split(", ") for line in apps.stdout.splitlines())
    assert rows == sorted([str(p), cmdline(p), str(MiB_40G)] for p in server.workers())


def test_metrics_over_http_have_a_series_per_rank(server):
    text = httpx.get(server.url("/metrics"), timeout=5).text
    ranks = [line for line in text.splitlines() if line.startswith("sglang:num_running_reqs{")]
    assert len(ranks) == 2


def test_sigterm_exits_zero_and_releases_the_gpus(sims):
    sim = sims.start("--workers", "2", "--gpus", "2,3")
    workers = sim.workers()
    assert len(workers) == 2
    assert gpu_used(sim.state_dir)[2] == MiB_40G
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.proc.wait(10) == 0
    assert wait_until(lambda: not any(alive(p) for p in workers), 5)
    assert gpu_used(sim.state_dir) == {0: 0, 1: 0, 2: 0, 3: 0}
    assert "Server stopped" in sim.text()


def test_health503_loading_answers_503_until_ready(sims):
    sim = sims.start("--load-seconds", "1.5", ready=False)
    sim.wait_bound()
    sim.wait_for("Started server process")
    assert httpx.get(sim.url("/health"), timeout=5).status_code == 503
    assert httpx.get(sim.url("/health_generate"), timeout=5).status_code == 503
    reply = httpx.post(sim.url("/v1/completions"), json={"prompt": "x"}, timeout=5)
    assert reply.status_code == 503
    assert "ready to roll" not in sim.text()
    sim.wait_for("ready to roll")  # logged once the warm-up generation succeeded
    # SGLang's health handler then waits ~1 s for output (a 1-token generation when idle).
    started = time.monotonic()
    assert httpx.get(sim.url("/health"), timeout=5).status_code == 200
    assert time.monotonic() - started >= 1.0


def test_no_listen_loading_refuses_connections_but_holds_the_port(sims):
    sim = sims.start("--load-seconds", "1.5", "--load-mode", "no-listen", ready=False)
    sim.wait_bound()
    with pytest.raises(httpx.ConnectError):
        httpx.get(sim.url("/health"), timeout=5)
    other = socket.socket()
    with pytest.raises(OSError) as taken:
        other.bind(("127.0.0.1", sim.port))
    other.close()
    assert taken.value.errno == errno.EADDRINUSE
    sim.wait_for("ready to roll")
    assert httpx.get(sim.url("/health"), timeout=5).status_code == 200


def test_orphan_workers_survive_sigkill_and_keep_memory(sims):
    sim = sims.start(
        "--workers", "1", "--gpus", "1", "--gpu-memory-gb", "60", "--fault-orphan-workers"
    )
    (worker,) = sim.workers()
    os.kill(sim.proc.pid, signal.SIGKILL)
    sim.proc.wait(5)
    time.sleep(1.0)
    assert alive(worker)
    assert gpu_used(sim.state_dir)[1] == 60 * 1024
    # The surviving orphan blocks the next server on that GPU, as on a real machine.
    blocked = sims.start("--workers", "1", "--gpus", "1", "--gpu-memory-gb", "60", ready=False)
    assert blocked.proc.wait(20) == 1
    assert "CUDA out of memory" in blocked.text()
    os.kill(worker, signal.SIGKILL)
    assert wait_until(lambda: gpu_used(sim.state_dir)[1] == 0, 5)


def test_workers_exit_soon_after_the_parent_is_killed(sims):
    sim = sims.start("--workers", "2", "--gpus", "0,1")
    workers = sim.workers()
    os.kill(sim.proc.pid, signal.SIGKILL)
    sim.proc.wait(5)
    assert wait_until(lambda: not any(alive(p) for p in workers), 5)
    assert gpu_used(sim.state_dir)[0] == 0


def test_workers_ignoring_sigterm_need_sigkill(sims):
    sim = sims.start("--workers", "1", "--fault-ignore-sigterm")
    (worker,) = sim.workers()
    os.kill(worker, signal.SIGTERM)
    sim.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert alive(worker)
    assert sim.proc.poll() is None  # the parent waits for its worker
    os.kill(worker, signal.SIGKILL)
    assert sim.proc.wait(10) == 0


def test_setsid_workers_leave_the_process_group_and_session(sims):
    sim = sims.start("--workers", "2", "--gpus", "0,1", "--fault-setsid-workers")
    parent = sim.proc.pid
    for worker in sim.workers():
        assert os.getpgid(worker) != os.getpgid(parent)
        assert os.getsid(worker) != os.getsid(parent)
        assert os.getsid(worker) == worker


def test_crash_after_requests_exits_abruptly(sims):
    sim = sims.start("--workers", "1", "--crash-after-requests", "2")
    (worker,) = sim.workers()
    for _ in range(2):
        httpx.post(sim.url("/v1/completions"), json={"prompt": "x", "max_tokens": 2}, timeout=5)
    assert sim.proc.wait(10) == 1
    assert "Fatal: crash-after-requests fault after 2 completed requests" in sim.text()
    assert wait_until(lambda: not alive(worker), 5)


def test_oom_at_start_exits_1_with_a_cuda_message(sims):
    started = time.monotonic()
    sim = sims.start("--fail-oom-at-start", ready=False)
    assert sim.proc.wait(20) == 1
    assert time.monotonic() - started < 15
    assert "torch.OutOfMemoryError: CUDA out of memory" in sim.text()
    assert gpu_used(sim.state_dir)[0] == 0


def test_help_documents_every_flag():
    out = subprocess.run(
        [sys.executable, "-m", "benchlib.simulator", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0
    for flag in (
        "--profile",
        "--t0-ms",
        "--k-ms",
        "--max-running",
        "--kv-tokens",
        "--seed",
        "--metrics-style",
        "--load-seconds",
        "--load-mode",
        "--workers",
        "--gpus",
        "--gpu-memory-gb",
        "--state-dir",
        "--truth-log",
        "--fault-orphan-workers",
        "--fault-ignore-sigterm",
        "--fault-setsid-workers",
        "--crash-after-requests",
        "--fail-oom-at-start",
        "--accept-length",
        "--spec-steps",
        "--eos-prob",
    ):
        assert flag in out.stdout
