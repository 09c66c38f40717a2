"""The one level supervisor, against a scripted source that records what it was asked: how it
ends on the source's own end, a cancel and a crash, and the stopping choices that tell the
paths apart (no database, no process)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from benchlib.loadgen.events import LoadgenEvent
from benchmarks.sweeps.supervisor import Stopping, supervise

ONE_PROCESS = Stopping(drain_grace=0.2, kill_on_overrun=True, exit_wait=0.2, crash_settle=0.2)
SHARDS = Stopping(
    drain_grace=0.2,
    kill_on_overrun=False,
    exit_wait=0.0,
    reraise_reader_error=False,
    kill_on_leaving=True,
)


class ScriptedSource:
    """Sends its events, then, unless ``forever``, ends; on a terminate it sends ``on_terminate``
    and ends unless ``deaf``. Records each call it gets."""

    def __init__(
        self,
        events: list[LoadgenEvent],
        *,
        forever: bool = False,
        deaf: bool = False,
        on_terminate: list[LoadgenEvent] | None = None,
        fail_after: int | None = None,
    ) -> None:
        self.script = events
        self.forever = forever
        self.deaf = deaf
        self.on_terminate = on_terminate or []
        self.fail_after = fail_after
        self.calls: list[str] = []
        self._stop = asyncio.Event()
        self._killed = asyncio.Event()

    @property
    def pid(self) -> int:
        return 4242

    async def events(self) -> AsyncIterator[LoadgenEvent]:
        for n, event in enumerate(self.script):
            if self.fail_after is not None and n == self.fail_after:
                raise RuntimeError("reading broke")
            yield event
        if not self.forever:
            return
        waits = {asyncio.create_task(self._stop.wait()), asyncio.create_task(self._killed.wait())}
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for wait in waits:
            wait.cancel()
        if not self._killed.is_set():
            for event in self.on_terminate:
                yield event

    def terminate(self) -> None:
        self.calls.append("terminate")
        if not self.deaf:
            self._stop.set()

    def kill(self) -> None:
        self.calls.append("kill")
        self._killed.set()

    async def ended(self, *, wait: float, grace: float) -> int:
        self.calls.append(f"ended(wait={wait:g}, grace={grace:g})")
        return -9 if self._killed.is_set() else 0

    def stderr_text(self) -> str:
        return ""


def _sample(n: int) -> LoadgenEvent:
    return {"event": "sample", "level_index": 0, "completed": n}


def _partial() -> LoadgenEvent:
    return {"event": "run_end", "status": "cancelled"}


async def _never() -> str:
    await asyncio.Event().wait()
    return "unreachable"


async def test_a_source_that_ends_by_itself_is_read_to_the_end_and_never_stopped() -> None:
    source = ScriptedSource([_sample(1), _sample(2)])
    taken: list[LoadgenEvent] = []

    async def take(event: LoadgenEvent) -> None:
        taken.append(event)

    ending = await supervise(
        source, take=take, cancelled=asyncio.Event(), stopping=ONE_PROCESS, crash_watch=_never,
        completed=lambda: True,
    )  # fmt: skip
    assert taken == [_sample(1), _sample(2)]
    assert (ending.crash, ending.cancelled, ending.exit_code) == (None, False, 0)
    assert source.calls == ["ended(wait=0.2, grace=5)"]


async def test_a_cancel_terminates_and_drains_the_partial_level_before_the_exit() -> None:
    source = ScriptedSource([_sample(1)], forever=True, on_terminate=[_partial()])
    cancelled = asyncio.Event()
    taken: list[LoadgenEvent] = []

    async def take(event: LoadgenEvent) -> None:
        taken.append(event)
        cancelled.set()

    ending = await supervise(source, take=take, cancelled=cancelled, stopping=ONE_PROCESS)
    assert taken == [_sample(1), _partial()]
    assert ending.cancelled and ending.crash is None and ending.exit_code == 0
    assert source.calls == ["terminate", "ended(wait=0.2, grace=5)"]


async def test_the_crash_watch_ending_first_names_the_crash_and_stops_the_source() -> None:
    source = ScriptedSource([], forever=True, on_terminate=[_partial()])

    async def crashed() -> str:
        return "crashed: process exited with code 1"

    async def take(event: LoadgenEvent) -> None:
        pass

    ending = await supervise(
        source, take=take, cancelled=asyncio.Event(), stopping=ONE_PROCESS, crash_watch=crashed
    )
    assert ending.crash == "crashed: process exited with code 1" and not ending.cancelled
    assert source.calls[0] == "terminate"


async def test_a_run_that_gave_up_waits_for_the_crash_verdict_but_a_completed_one_does_not() -> (
    None
):
    async def crash_soon() -> str:
        await asyncio.sleep(0.05)
        return "crashed"

    async def take(event: LoadgenEvent) -> None:
        pass

    gave_up = await supervise(
        ScriptedSource([]), take=take, cancelled=asyncio.Event(), stopping=ONE_PROCESS,
        crash_watch=crash_soon, completed=lambda: False,
    )  # fmt: skip
    completed = await supervise(
        ScriptedSource([]), take=take, cancelled=asyncio.Event(), stopping=ONE_PROCESS,
        crash_watch=crash_soon, completed=lambda: True,
    )  # fmt: skip
    shards = await supervise(
        ScriptedSource([]), take=take, cancelled=asyncio.Event(), stopping=SHARDS,
        crash_watch=crash_soon,
    )  # fmt: skip
    assert (gave_up.crash, completed.crash, shards.crash) == ("crashed", None, None)


async def test_one_process_past_its_drain_grace_is_killed_at_once() -> None:
    source = ScriptedSource([], forever=True, deaf=True)
    cancelled = asyncio.Event()
    cancelled.set()

    async def take(event: LoadgenEvent) -> None:
        pass

    ending = await supervise(source, take=take, cancelled=cancelled, stopping=ONE_PROCESS)
    assert source.calls == ["terminate", "kill", "ended(wait=0.2, grace=5)"]
    assert ending.exit_code == -9


async def test_shards_past_their_drain_grace_are_left_to_their_stop_then_killed_on_leaving() -> (
    None
):
    source = ScriptedSource([], forever=True, deaf=True)
    cancelled = asyncio.Event()
    cancelled.set()

    async def take(event: LoadgenEvent) -> None:
        pass

    ending = await supervise(source, take=take, cancelled=cancelled, stopping=SHARDS)
    assert source.calls == ["terminate", "ended(wait=0, grace=5)", "kill"]
    assert ending.cancelled and ending.exit_code == 0


async def test_a_failed_reader_raises_for_one_process_and_ends_the_level_for_shards() -> None:
    async def take(event: LoadgenEvent) -> None:
        pass

    one = ScriptedSource([_sample(1), _sample(2)], fail_after=1)
    with pytest.raises(RuntimeError, match="reading broke"):
        await supervise(one, take=take, cancelled=asyncio.Event(), stopping=ONE_PROCESS)
    assert one.calls == ["terminate"]

    shards = ScriptedSource([_sample(1), _sample(2)], fail_after=1)
    ending = await supervise(shards, take=take, cancelled=asyncio.Event(), stopping=SHARDS)
    assert not ending.cancelled and ending.crash is None
    assert shards.calls == ["ended(wait=0, grace=5)", "kill"]


async def test_the_start_step_runs_while_events_are_read_and_before_the_watch() -> None:
    source = ScriptedSource([_sample(1)], forever=True, on_terminate=[_partial()])
    cancelled = asyncio.Event()
    cancelled.set()  # already set: only a watch begun after the start step can see it
    seen_before_watch: list[LoadgenEvent] = []
    taken: list[LoadgenEvent] = []

    async def take(event: LoadgenEvent) -> None:
        taken.append(event)

    async def start(reader: asyncio.Task[None]) -> None:
        while not taken:
            await asyncio.sleep(0.01)
        seen_before_watch.extend(taken)
        assert source.calls == [] and not reader.done()

    ending = await supervise(
        source, take=take, cancelled=cancelled, stopping=SHARDS, before_watch=start
    )
    assert seen_before_watch == [_sample(1)] and taken == [_sample(1), _partial()]
    assert ending.cancelled and source.calls[0] == "terminate"
