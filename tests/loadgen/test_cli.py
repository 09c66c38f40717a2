from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stub_process(tmp_path):
    """The stub server in its own process, so that it can be killed like a dying server."""
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.loadgen.stub_server",
            "--port-file",
            str(port_file),
            "--chunk-delay",
            "0.02",
        ],
        cwd=ROOT,
    )
    deadline = time.monotonic() + 20
    while not port_file.exists():
        assert time.monotonic() < deadline, "stub server did not start"
        assert proc.poll() is None
        time.sleep(0.02)
    yield proc, int(port_file.read_text())
    if proc.poll() is None:
        proc.terminate()
    proc.wait(10)


class Loadgen:
    """The CLI as the dashboard runs it: a subprocess whose stdout is the event stream."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.loadgen", "--events", "-", "--quiet", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._q.put(line)
        self._q.put(None)

    def wait_for(self, pred, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            line = self._q.get(timeout=max(0.01, deadline - time.monotonic()))
            assert line is not None, f"stream ended first: {self.events}"
            event = json.loads(line)  # every line is one JSON object
            self.events.append(event)
            if pred(event):
                return event

    def finish(self, timeout: float = 30) -> int:
        rc = self.proc.wait(timeout)
        while (line := self._q.get(timeout=5)) is not None:
            self.events.append(json.loads(line))
        return rc

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["event"] == kind]


def test_sigterm_cancels_with_a_partial_summary_and_exit_zero(stub_process, tmp_path):
    _, port = stub_process
    out = tmp_path / "results.json"
    lg = Loadgen(
        [
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--concurrency",
            "3,6",
            "--duration",
            "60",
            "--max-tokens",
            "200",
            "--sample-interval",
            "0.2",
            "--output",
            str(out),
            "--records",
            str(tmp_path / "records.jsonl"),
        ]
    )
    lg.wait_for(lambda e: e["event"] == "sample" and e["completed"] >= 0 and e["in_flight"] == 3)
    lg.proc.send_signal(signal.SIGTERM)
    assert lg.finish() == 0
    kinds = [e["event"] for e in lg.events]
    assert kinds[0] == "run_start"
    assert kinds[1] == "level_start"
    assert kinds[-1] == "run_end"
    assert lg.events[-1]["status"] == "cancelled"
    (summary,) = lg.of("level_summary")
    s = summary["summary"]
    assert s["partial"] is True
    assert s["status"] == "cancelled"
    assert s["requests"]["errors_by_cause"].get("cancelled") == 3
    assert len(lg.of("level_start")) == 1  # the second level never started
    result = json.loads(out.read_text())
    assert result["status"] == "cancelled"
    assert len(result["levels"]) == 1
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert sum(r.get("error_kind") == "cancelled" for r in records) == 3


def test_server_killed_mid_level_ends_the_run_failed_keeping_completed_levels(
    stub_process, tmp_path
):
    proc, port = stub_process
    out = tmp_path / "results.json"
    lg = Loadgen(
        [
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--concurrency",
            "2,4,8",
            "--duration",
            "1.0",
            "--max-tokens",
            "10",
            "--sample-interval",
            "0.2",
            "--output",
            str(out),
        ]
    )
    lg.wait_for(lambda e: e["event"] == "level_start" and e["level_index"] == 1)
    lg.wait_for(lambda e: e["event"] == "sample" and e["level_index"] == 1)
    os.kill(proc.pid, signal.SIGKILL)
    assert lg.finish() == 3
    end = lg.events[-1]
    assert end["event"] == "run_end"
    assert end["status"] == "failed"
    assert "connection" in end["reason"]
    summaries = {e["level_index"]: e["summary"] for e in lg.of("level_summary")}
    assert summaries[0]["status"] == "completed"
    assert summaries[0]["partial"] is False
    assert summaries[0]["requests"]["failed"] == 0
    assert summaries[1]["status"] == "failed"
    assert summaries[1]["partial"] is True
    assert [e["level_index"] for e in lg.of("level_error")] == [1]
    assert 2 not in summaries
    result = json.loads(out.read_text())
    assert result["status"] == "failed"
    assert [lv["status"] for lv in result["levels"]] == ["completed", "failed"]


def test_two_processes_from_the_cli_give_one_merged_level(stub_process, tmp_path):
    _, port = stub_process
    out = tmp_path / "results.json"
    lg = Loadgen(
        [
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--concurrency",
            "4",
            "--requests-per-level",
            "20",
            "--warmup-requests",
            "2",
            "--max-tokens",
            "5",
            "--processes",
            "2",
            "--output",
            str(out),
            "--records",
            str(tmp_path / "r.jsonl"),
            "--api",
            "chat",
        ]
    )
    assert lg.finish(60) == 0
    assert lg.events[-1]["status"] == "completed"
    s = json.loads(out.read_text())["levels"][0]
    assert s["processes"] == 2
    assert s["requests"]["ok"] == 20
    assert s["warmup_requests"] == 2
    assert len(s["client"]["processes"]) == 2
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert {r["proc"] for r in records} == {0, 1}
    assert len({r["id"] for r in records}) == 22


def test_bad_arguments_exit_with_usage_error():
    rc = subprocess.run(
        [sys.executable, "-m", "benchmarks.loadgen", "--base-url", "http://x"],
        cwd=ROOT,
        capture_output=True,
    ).returncode
    assert rc == 2
