"""One supervisor for a level's load, whichever way it runs.

A sweep's load runs as one load-generator process (``handler``), as a level's shard processes
on this machine or as shard jobs on other machines (``distributed``, seen through
``shardset.ShardSet``), and a shard job runs one process on its worker (``shards.run_shard``).
Each is a ``LevelSource``; ``supervise`` is the one loop they share: it reads the source's
events into the caller's ``take``, watches the job's cancel and the server (the crash watch),
and on either it terminates the source and drains it within a grace, then collects its exit.
Starting a source stays with each path (spawn, placement, gang start), as does what its
events become and how its outcome reads; the few ways the paths stop differently are named
in ``Stopping``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from benchlib.loadgen.events import LoadgenEvent
from benchmarks.sweeps import recording, store
from benchmarks.sweeps.scrapes import scrapes_keeper
from hosts.models import InstanceState
from hosts.telemetry.levels import LevelServerMetrics

logger = logging.getLogger(__name__)

# Past the kill of a source that overran its drain: the reader's last chance to take what the
# closed pipe still holds.
KILLED_READ_S = 5.0


class LevelSource(Protocol):
    """What runs a level's load: its events as parsed, and stopping it.

    ``terminate`` asks it to end the level as partial (SIGTERM, a job's cancel), ``kill`` ends
    it at once; ``ended`` gives its exit code, waiting ``wait`` seconds for it to exit on its
    own, then terminating it and killing it past ``grace``."""

    @property
    def pid(self) -> int: ...

    def events(self) -> AsyncIterator[LoadgenEvent]: ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...

    async def ended(self, *, wait: float, grace: float) -> int: ...

    def stderr_text(self) -> str: ...


@dataclass(frozen=True)
class Stopping:
    """How a path stops its source: the only ways the three paths differ in supervision."""

    # After a terminate: time for the source to report the partial level and run_end.
    drain_grace: float
    # Past the drain grace: kill at once (one process: its reader then gets KILLED_READ_S),
    # or leave the source to ``ended``'s own terminate-then-kill (shards, one by one).
    kill_on_overrun: bool
    # After its events end: time the source gets to exit on its own before ``ended`` stops it.
    exit_wait: float
    exit_grace: float = 5.0
    # A run that did not complete, with a crash watch: how long to wait for the lifecycle's
    # verdict on the server (None: not waited for).
    crash_settle: float | None = None
    # A reader that fails: terminate the source and raise; or (a split level, whose shards'
    # readers ran gathered) count the level as read and stop the shards as at its end.
    reraise_reader_error: bool = True
    # On the way out, even when the job itself is cancelled: kill the source and wait for its
    # reader. Off for one process: on a worker's shutdown its reader goes on taking the cut
    # level while the job waits for the process to exit.
    kill_on_leaving: bool = False


@dataclass(frozen=True)
class Ending:
    """How a supervised source ended: the server's crash (the watch's words), the job's
    cancel, or neither (its events ended); and its exit code."""

    crash: str | None
    cancelled: bool
    exit_code: int


def sweep_server_metrics(plan: recording.SweepPlan) -> LevelServerMetrics:
    """The server's figures at each level's boundaries, whichever way the level runs: saved on
    the level's row, the raw scrapes kept beside the records for the audit."""
    return LevelServerMetrics.for_sweep(
        plan.sweep_id,
        plan.base_url,
        save=store.asweep_level_server_metrics_save,
        keep=scrapes_keeper(plan.records_path, attempt=plan.attempt),
        undrafted_steps=plan.undrafted_steps,
        metrics_url=plan.metrics_url,
    )


async def watch_instance(instance_id: int, poll: float, *, with_reason: bool = True) -> str:
    """Return why the server instance is no longer READY (the lifecycle marks crashes): its
    state and, ``with_reason``, the reason the lifecycle gave."""
    while True:
        row = await store.ainstance_state(instance_id=instance_id)
        if row is None:
            return "the server instance no longer exists"
        state, reason = row
        if state != InstanceState.READY:
            return f"{state}: {reason}" if reason and with_reason else str(state)
        await asyncio.sleep(poll)


async def _read(source: LevelSource, take: Callable[[LoadgenEvent], Awaitable[None]]) -> None:
    async for event in source.events():
        await take(event)


async def _drain(reader: asyncio.Task[None], source: LevelSource, stopping: Stopping) -> None:
    """After a terminate: let the reader take the partial level and run_end, within the grace."""
    done, _ = await asyncio.wait({reader}, timeout=stopping.drain_grace)
    if not done and stopping.kill_on_overrun:
        logger.warning(
            "load generator %s did not finish within %.0fs: killing",
            source.pid,
            stopping.drain_grace,
        )
        source.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reader), timeout=KILLED_READ_S)
        reader.cancel()


async def _crash_behind(
    crash_watch: asyncio.Task[str], settle: float, completed: Callable[[], bool]
) -> str | None:
    """A load generator can give up on a dead server (connection errors in a row) before the
    lifecycle has marked it crashed: a run that did not complete waits for that verdict, so
    the sweep names the cause instead of the symptom."""
    if completed():
        return None
    done, _ = await asyncio.wait({crash_watch}, timeout=settle)
    return crash_watch.result() if done else None


async def supervise(
    source: LevelSource,
    *,
    take: Callable[[LoadgenEvent], Awaitable[None]],
    cancelled: asyncio.Event,
    stopping: Stopping,
    crash_watch: Callable[[], Coroutine[Any, Any, str]] | None = None,
    before_watch: Callable[[asyncio.Task[None]], Awaitable[None]] | None = None,
    completed: Callable[[], bool] = lambda: False,
) -> Ending:
    """Read ``source``'s events into ``take`` until they end, the job is ``cancelled`` or the
    ``crash_watch`` returns (why the server is gone); on either of those the source is
    terminated and drained. ``before_watch`` (given the reader) runs once the events are being
    read and before the watch begins: a start given once the shards are up. ``completed``
    says whether the run ended completed (no crash verdict is then waited for)."""
    reader = asyncio.create_task(_read(source, take))
    watchers: list[asyncio.Task[Any]] = []
    crash: str | None = None
    was_cancelled = False
    try:
        if before_watch is not None:
            await before_watch(reader)
        cancel_wait = asyncio.create_task(cancelled.wait())
        watchers.append(cancel_wait)
        watch = asyncio.create_task(crash_watch()) if crash_watch is not None else None
        if watch is not None:
            watchers.append(watch)
        done, _ = await asyncio.wait({reader, *watchers}, return_when=asyncio.FIRST_COMPLETED)
        if reader not in done:
            if watch is not None and watch in done:
                crash = watch.result()
            else:
                was_cancelled = True
            source.terminate()
            await _drain(reader, source, stopping)
        elif reader.exception() is not None:
            if stopping.reraise_reader_error:
                source.terminate()
                reader.result()
            failure = reader.exception()
            logger.warning("reading the load generator's events failed", exc_info=failure)
        elif watch is not None and stopping.crash_settle is not None:
            crash = await _crash_behind(watch, stopping.crash_settle, completed)
        exit_code = await source.ended(wait=stopping.exit_wait, grace=stopping.exit_grace)
    finally:
        for task in watchers:
            task.cancel()
        if stopping.kill_on_leaving:
            source.kill()
        await asyncio.gather(
            *watchers, *([reader] if stopping.kill_on_leaving else []), return_exceptions=True
        )
    return Ending(crash=crash, cancelled=was_cancelled, exit_code=exit_code)


__all__ = ["Ending", "LevelSource", "Stopping", "supervise", "watch_instance"]
