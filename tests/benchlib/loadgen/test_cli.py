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

import httpx
import pytest

from benchlib.loadgen.recordstore import iter_rows
from tests.fixtures.ports import free_port

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def stub_process(tmp_path):
    """The stub server in its own process, so that it can be killed like a dying server."""
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.benchlib.loadgen.stub_server",
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


# The load generator's CLI with its modules imported before it is given its arguments (a JSON
# list on stdin); it says so with one event of its own first.
PRELOADED = """
import json, sys
from benchlib.loadgen.cli import main
print(json.dumps({"event": "preloaded"}), flush=True)
sys.exit(main(sys.argv[1:] + json.loads(sys.stdin.readline())))
"""


class Loadgen:
    """The CLI as the dashboard runs it: a subprocess whose stdout is the event stream."""

    def __init__(self, args: list[str], *, stdin: bool = False, preload: bool = False) -> None:
        head = ["-c", PRELOADED] if preload else ["-m", "benchlib.loadgen"]
        self.proc = subprocess.Popen(
            [sys.executable, *head, "--events", "-", "--quiet", *args],
            cwd=ROOT,
            stdin=subprocess.PIPE if stdin or preload else None,
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


@pytest.mark.parametrize("suffix", [".jsonl", ".sdrec"])
def test_two_processes_from_the_cli_give_one_merged_level(stub_process, tmp_path, suffix):
    # The workers append their records to the file themselves, as requests complete; the
    # summary is read back from it.
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
            str(tmp_path / f"r{suffix}"),
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
    records = list(iter_rows(tmp_path / f"r{suffix}"))
    assert {r["proc"] for r in records} == {0, 1}
    assert len({r["id"] for r in records}) == 22


def test_bad_arguments_exit_with_usage_error():
    rc = subprocess.run(
        [sys.executable, "-m", "benchlib.loadgen", "--base-url", "http://x"],
        cwd=ROOT,
        capture_output=True,
    ).returncode
    assert rc == 2


def _short_run(port: int, *extra: str) -> list[str]:
    return [
        "--base-url",
        f"http://127.0.0.1:{port}",
        "--concurrency",
        "2",
        "--requests-per-level",
        "4",
        "--max-tokens",
        "3",
        *extra,
    ]


def test_start_at_in_the_future_holds_the_first_level_until_that_wall_clock_time(stub_process):
    _, port = stub_process
    # The start is chosen once the process has imported its modules: a start chosen before
    # the interpreter started was already past on a loaded machine, where the imports alone
    # can take longer than the 3 s ahead it was.
    lg = Loadgen(_short_run(port), preload=True)
    lg.wait_for(lambda e: e["event"] == "preloaded")
    start_at = time.time() + 3.0
    assert lg.proc.stdin is not None
    lg.proc.stdin.write(json.dumps(["--start-at", repr(start_at)]) + "\n")
    lg.proc.stdin.close()
    assert lg.finish(60) == 0
    run_start = lg.of("run_start")[0]
    assert run_start["start_at"] == start_at
    assert run_start["start_at_passed"] is False
    assert run_start["start_at_late_s"] == 0
    (level_start,) = lg.of("level_start")
    assert level_start["t"] >= start_at
    assert level_start["t"] - run_start["t"] >= 2.0  # it really waited
    (summary,) = lg.of("level_summary")
    assert summary["summary"]["window_wall"][0] >= start_at
    assert summary["summary"]["requests"]["ok"] == 4
    assert lg.events[-1]["status"] == "completed"


def test_start_at_in_the_past_starts_at_once_and_says_how_late(stub_process):
    _, port = stub_process
    start_at = time.time() - 30.0
    lg = Loadgen(_short_run(port, "--start-at", repr(start_at)))
    assert lg.finish(60) == 0
    run_start = lg.of("run_start")[0]
    assert run_start["start_at_passed"] is True
    assert run_start["start_at_late_s"] >= 30.0
    (level_start,) = lg.of("level_start")
    assert level_start["t"] - run_start["t"] < 5.0
    assert lg.events[-1]["status"] == "completed"


def test_sigterm_while_waiting_for_start_at_cancels_before_any_level(stub_process):
    _, port = stub_process
    lg = Loadgen(_short_run(port, "--start-at", repr(time.time() + 120.0)))
    lg.wait_for(lambda e: e["event"] == "run_start")
    t0 = time.monotonic()
    lg.proc.send_signal(signal.SIGTERM)
    assert lg.finish(30) == 0
    assert time.monotonic() - t0 < 15.0
    assert lg.of("level_start") == []
    assert lg.events[-1]["event"] == "run_end"
    assert lg.events[-1]["status"] == "cancelled"
    assert lg.events[-1]["levels"] == 0


def test_a_start_given_on_stdin_after_run_start_holds_the_first_level_until_then(stub_process):
    _, port = stub_process
    lg = Loadgen(_short_run(port, "--start-at-stdin"), stdin=True)
    run_start = lg.wait_for(lambda e: e["event"] == "run_start")
    assert "start_at" not in run_start  # up and waiting: the start is not known yet
    time.sleep(1.0)
    assert lg.of("level_start") == []
    start_at = time.time() + 1.5
    assert lg.proc.stdin is not None
    lg.proc.stdin.write(f"{start_at!r}\n")
    lg.proc.stdin.close()
    assert lg.finish(60) == 0
    (given,) = lg.of("start_given")
    assert given["start_at"] == start_at and given["start_at_passed"] is False
    (level_start,) = lg.of("level_start")
    assert level_start["t"] >= start_at
    assert lg.events[-1]["status"] == "completed"


def test_end_of_input_instead_of_a_start_cancels_before_any_level(stub_process):
    _, port = stub_process
    lg = Loadgen(_short_run(port, "--start-at-stdin"), stdin=True)
    lg.wait_for(lambda e: e["event"] == "run_start")
    assert lg.proc.stdin is not None
    lg.proc.stdin.close()
    assert lg.finish(30) == 0
    assert lg.of("level_start") == []
    assert lg.events[-1]["status"] == "cancelled"


def test_sigterm_while_waiting_for_a_start_on_stdin_exits_promptly(stub_process):
    _, port = stub_process
    lg = Loadgen(_short_run(port, "--start-at-stdin"), stdin=True)
    lg.wait_for(lambda e: e["event"] == "run_start")
    t0 = time.monotonic()
    lg.proc.send_signal(signal.SIGTERM)
    # The blocked read is in a daemon thread: it does not keep the process alive.
    assert lg.finish(30) == 0
    assert time.monotonic() - t0 < 15.0
    assert lg.events[-1]["status"] == "cancelled" and lg.of("level_start") == []


# Named ids: the milliseconds value is read off the clock, and pytest-xdist's workers must collect
# the same test ids.
@pytest.mark.parametrize(
    "value",
    ["soon", "-5", "nan", str(int(time.time() * 1000))],
    ids=["word", "negative", "nan", "milliseconds"],
)
def test_start_at_that_is_not_plausible_epoch_seconds_is_a_usage_error(value):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchlib.loadgen",
            "--base-url",
            "http://x",
            "--requests-per-level",
            "1",
            "--start-at",
            value,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "--start-at" in proc.stderr


def _stub_stats(port: int) -> dict:
    return httpx.get(f"http://127.0.0.1:{port}/stats", timeout=10).json()


def _broken_pipe_run(port: int, tmp_path: Path, *extra: str) -> tuple[subprocess.Popen, int]:
    """The CLI with its event stream on a pipe whose read end the test holds (returned)."""
    r, w = os.pipe()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchlib.loadgen",
            "--events",
            "-",
            "--quiet",
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--output",
            str(tmp_path / "results.json"),
            "--records",
            str(tmp_path / "records.jsonl"),
            *extra,
        ],
        cwd=ROOT,
        stdout=w,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(w)
    return proc, r


def _read_events_until(fd: int, pred, timeout: float = 30) -> list[dict]:
    events: list[dict] = []
    buf = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        chunk = os.read(fd, 65536)
        assert chunk, f"stream ended first: {events}"
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            events.append(json.loads(line))
            if pred(events[-1]):
                return events
    raise AssertionError(f"no matching event within {timeout}s: {events}")


def test_closing_the_event_pipe_cancels_the_run_and_stops_its_requests(stub_process, tmp_path):
    _, port = stub_process
    proc, r = _broken_pipe_run(
        port,
        tmp_path,
        "--concurrency",
        "3,6",
        "--duration",
        "120",
        "--max-tokens",
        "100000",  # 20 ms a chunk: each request would take over half an hour
        "--sample-interval",
        "60",  # no sample write for a minute: the pipe poll, not a failed write, must notice
    )
    try:
        _read_events_until(r, lambda e: e["event"] == "level_start")
        deadline = time.monotonic() + 30
        while _stub_stats(port)["in_flight"] < 3:
            assert time.monotonic() < deadline, "requests never got in flight"
            time.sleep(0.05)
        os.close(r)  # the reader (a dashboard worker) is gone
        t0 = time.monotonic()
        _, stderr = proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 10.0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, stderr
    assert "BrokenPipeError" not in stderr
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["status"] == "cancelled"
    assert result["reason"] == "event stream closed by its reader"
    (level,) = result["levels"]  # the second level never started
    assert level["partial"] is True
    assert level["requests"]["errors_by_cause"] == {"cancelled": 3}
    records = [json.loads(x) for x in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [r.get("error_kind") for r in records] == ["cancelled"] * 3
    # the server sees its streams end: nothing of the load generator is left running
    deadline = time.monotonic() + 10
    while (stats := _stub_stats(port))["in_flight"] != 0:
        assert time.monotonic() < deadline, stats
        time.sleep(0.05)
    requests_after_exit = stats["requests"]
    time.sleep(0.5)
    assert _stub_stats(port)["requests"] == requests_after_exit


def test_closing_the_event_pipe_while_waiting_for_start_at_ends_the_run(stub_process, tmp_path):
    _, port = stub_process
    proc, r = _broken_pipe_run(
        port,
        tmp_path,
        "--requests-per-level",
        "4",
        "--start-at",
        repr(time.time() + 300),
    )
    try:
        _read_events_until(r, lambda e: e["event"] == "run_start")
        os.close(r)
        t0 = time.monotonic()
        proc.communicate(timeout=30)
        assert time.monotonic() - t0 < 10.0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0
    result = json.loads((tmp_path / "results.json").read_text())
    assert result["status"] == "cancelled"
    assert result["levels"] == []
    assert _stub_stats(port)["requests"] == 0


def test_without_model_the_served_model_is_asked_of_the_server_and_sent(stub_process, tmp_path):
    _, port = stub_process
    base = f"http://127.0.0.1:{port}"
    lg = Loadgen(["--base-url", base, "--concurrency", "1", "--requests-per-level", "2"])
    assert lg.finish() == 0
    assert lg.of("run_start")[0]["params"]["model"] == "stub-model"
    assert lg.of("level_summary")[0]["summary"]["requests"]["ok"] == 2


def test_without_model_and_no_model_list_the_run_fails_clearly_before_any_level(tmp_path):
    port = free_port()  # a port nothing listens on
    lg = Loadgen(
        [
            "--base-url",
            f"http://127.0.0.1:{port}",
            "--concurrency",
            "1,2",
            "--requests-per-level",
            "2",
        ]
    )
    assert lg.finish() == 3
    assert lg.of("level_start") == []
    (error,) = lg.of("level_error")
    assert error["reason"].startswith(
        f"no model name to send: GET http://127.0.0.1:{port}/v1/models"
    )
    assert "--model" in error["reason"]
    assert lg.events[-1]["status"] == "failed"
