from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import typing
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from benchlib.loadgen.events import (
    EventWriter,
    LoadgenEvent,
    MalformedEvent,
    check_event,
    parse_event,
)
from tests.fixtures.ports import free_port

ROOT = Path(__file__).resolve().parents[3]


def test_a_failed_write_to_a_closed_pipe_reports_broken_once_and_stops_writing():
    r, w = os.pipe()
    calls: list[int] = []
    stream = os.fdopen(w, "w")
    try:
        writer = EventWriter(stream, on_broken=lambda: calls.append(1))
        # The pipe handling does not look at the event: a hand-made line keeps the bytes short.
        writer.emit(cast(LoadgenEvent, {"event": "sample", "n": 1}))
        assert os.read(r, 1000) == b'{"event":"sample","n":1}\n'
        os.close(r)
        writer.emit(cast(LoadgenEvent, {"event": "sample", "n": 2}))
        writer.emit(cast(LoadgenEvent, {"event": "sample", "n": 3}))
        writer.close()
        assert writer.broken is True
        assert writer.stream is None
        assert calls == [1]
    finally:
        with contextlib.suppress(BrokenPipeError):
            stream.close()  # the undeliverable line is still buffered


async def test_the_pipe_watch_notices_a_closed_reader_without_any_write():
    r, w = os.pipe()
    calls: list[int] = []
    with os.fdopen(w, "w") as stream:
        writer = EventWriter(stream, on_broken=lambda: calls.append(1))
        watch = asyncio.create_task(writer.watch(interval=0.01))
        await asyncio.sleep(0.05)
        assert calls == []  # an open reader is left alone
        os.close(r)
        await asyncio.wait_for(watch, timeout=10)
        assert calls == [1]
        assert writer.broken is True


async def test_the_pipe_watch_leaves_a_regular_file_alone():
    with tempfile.TemporaryFile("w") as f:
        writer = EventWriter(f, on_broken=lambda: None)
        watch = asyncio.create_task(writer.watch(interval=0.01))
        await asyncio.sleep(0.1)
        assert not watch.done()
        assert writer.broken is False
        watch.cancel()


@pytest.fixture
def simulator(tmp_path: Path) -> Iterator[str]:
    # Its own GPU ledger (--state-dir), as every other simulator the tests start: the default
    # one is shared by every simulator on the machine. Its log is kept, so an exit says why.
    port = free_port()
    log = tmp_path / "simulator.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1", "--port",
             str(port), "--seed", "7", "--workers", "0", "--state-dir", str(tmp_path / "state")],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, f"simulator exited: {log.read_text()[-2000:]}"
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "simulator not healthy"
        time.sleep(0.1)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def test_every_line_the_cli_writes_against_the_simulator_parses_as_a_declared_event(
    simulator: str,
) -> None:
    # Warm-up before a start given on stdin (warmed_up, start_given), boundary scrapes
    # (measure_start and level_summary carry them), samples every 0.1 s, two levels.
    argv = [sys.executable, "-m", "benchlib.loadgen", "--base-url", simulator,
            "--concurrency", "1,2", "--requests-per-level", "6", "--max-tokens", "40",
            "--warmup-requests", "1", "--sample-interval", "0.1", "--start-at-stdin",
            "--boundary-metrics-url", simulator + "/metrics", "--events", "-", "--quiet"]  # fmt: skip
    done = subprocess.run(
        argv, cwd=ROOT, input=f"{time.time() + 0.5}\n", capture_output=True, text=True,
        timeout=90, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    events = [parse_event(line) for line in lines]
    kinds = [e["event"] for e in events]
    assert kinds[0] == "run_start" and kinds[-1] == "run_end"
    assert {"start_given", "warmed_up", "level_start", "measure_start", "sample",
            "level_summary"} <= set(kinds)  # fmt: skip
    assert kinds.count("level_summary") == 2
    declared = {
        typing.get_type_hints(cls)["event"].__args__[0]: cls
        for cls in typing.get_args(LoadgenEvent)
    }
    for line, event in zip(lines, events, strict=True):
        # Nothing written that its declaration does not name, and the line is the event's
        # own bytes (parsing keeps every key and its order).
        assert set(event) <= set(declared[event["event"]].__annotations__), line
        assert json.dumps(event, separators=(",", ":")) == line
    measure = [e for e in events if e["event"] == "measure_start"]
    assert all("server_metrics_text" in e for e in measure)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("Traceback (most recent call last):", "not a JSON line"),
        ('["event"]', "an event is a JSON object, not list"),
        ('{"event":"level_done","level_index":0}', "unknown event 'level_done'"),
        ('{"level_index":0}', "unknown event None"),
        ('{"event":"level_start","level_index":0}', "level_start event without concurrency"),
        ('{"event":"run_end"}', "run_end event without status"),
        ('{"event":"sample","level_index":"0"}', "sample event's level_index is '0', not int"),
        ('{"event":"level_error","level_index":0,"reason":7}', "reason is 7, not str or NoneType"),
    ],
)
def test_a_malformed_or_unknown_line_is_refused_saying_what_is_wrong(line: str, says: str) -> None:
    with pytest.raises(MalformedEvent) as refused:
        parse_event(line)
    assert says in str(refused.value)
    assert line[:20] in str(refused.value)  # the line itself, to find it in a log


def test_check_event_takes_an_event_whose_required_keys_are_there() -> None:
    event = check_event({"event": "run_end", "status": "completed", "levels": 2})
    assert event == {"event": "run_end", "status": "completed", "levels": 2}
    with pytest.raises(MalformedEvent, match="level_summary event without level_index"):
        check_event({"event": "level_summary", "summary": {}})
