"""Stopping a load generator that has just exited on its own must not take its exit status
from asyncio: a kill sent as its last lines are read (a shard leaving its level) once reaped
the child itself, and asyncio's watcher thread then reported exit code 255 for a clean exit."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.sweeps.runner import LoadgenProcess


class _LateWatcher(asyncio.ThreadedChildWatcher):
    """asyncio's default watcher whose thread starts waiting half a second late, as a thread
    that a busy machine has not scheduled yet."""

    def _do_waitpid(self, loop: Any, expected_pid: int, callback: Any, args: Any) -> None:
        time.sleep(0.5)
        super()._do_waitpid(loop, expected_pid, callback, args)  # type: ignore[misc]


@pytest.fixture
def late_watcher() -> Iterator[None]:
    policy = asyncio.get_event_loop_policy()
    before = policy.get_child_watcher()
    watcher = _LateWatcher()
    policy.set_child_watcher(watcher)
    yield
    policy.set_child_watcher(before)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


async def _exited_unreaped(proc: LoadgenProcess) -> None:
    deadline = time.monotonic() + 10
    while not _is_zombie(proc.pid):
        assert time.monotonic() < deadline, "the child neither exited nor stayed unreaped"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("stop", ["kill", "terminate"])
async def test_a_signal_to_a_child_that_has_just_exited_keeps_its_exit_code(
    late_watcher: None, stop: str
) -> None:
    proc = await LoadgenProcess.start([sys.executable, "-c", "raise SystemExit(3)"])
    await _exited_unreaped(proc)
    getattr(proc, stop)()
    # Its own code, from the watcher that reaps it, not 255 for a child reaped elsewhere.
    assert await proc.wait(10) == 3


async def test_a_kill_still_ends_a_running_load_generator(late_watcher: None) -> None:
    proc = await LoadgenProcess.start([sys.executable, "-c", "import time; time.sleep(60)"])
    started = time.monotonic()
    proc.kill()
    assert await proc.wait(20) == -9
    assert time.monotonic() - started < 20
