"""A split level's shards as one ``supervisor.LevelSource``.

Its members are local load-generator processes or remote shard jobs (``shards``), all of one
level. Each member's events are read as they come, into its ``split.Shard`` (run_start,
run_end, warm-up, summary and clock anchor: what the merge needs); the set's own events are
what the level reports live: the shards' latest samples combined once every shard has sent a
fresh one, and each shard's level errors.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from benchlib.loadgen.events import LoadgenEvent, check_event
from benchlib.loadgen.records import ClockAnchor
from benchmarks.sweeps.runner import LoadgenProcess
from benchmarks.sweeps.shards import RemoteShardProcess
from benchmarks.sweeps.split import Shard, combine_samples


@dataclass(frozen=True)
class _MemberEnded:
    error: Exception | None


class ShardSet:
    """One split level in flight: its shards, their processes, and the events they send.

    Its events end once every member's have, or at the first member whose reading fails (its
    error raised, as a gather of the members' readers would); the other members are still
    read into their shards until ``closed``."""

    def __init__(self, index: int, concurrency: int, shards: list[Shard]) -> None:
        self.index = index
        self.concurrency = concurrency
        self.shards = shards
        self.procs: list[LoadgenProcess | RemoteShardProcess] = []
        self.warmed_up: set[int] = set()  # shards that said `warmed_up` (started on stdin)
        self.finished: set[int] = set()  # shards whose events have ended
        self._fresh: set[int] = set()
        self._out: asyncio.Queue[LoadgenEvent | _MemberEnded] = asyncio.Queue()
        self._readers: list[asyncio.Task[None]] = []

    @property
    def pid(self) -> int:
        return self.procs[0].pid if self.procs else 0  # shown in logs only

    async def events(self) -> AsyncIterator[LoadgenEvent]:
        self._readers = [
            asyncio.create_task(self._read(shard, proc))
            for shard, proc in zip(self.shards, self.procs, strict=True)
        ]
        reading = len(self._readers)
        while reading:
            item = await self._out.get()
            if not isinstance(item, _MemberEnded):
                yield item
                continue
            if item.error is not None:
                raise item.error
            reading -= 1

    async def _read(self, shard: Shard, proc: LoadgenProcess | RemoteShardProcess) -> None:
        error: Exception | None = None
        try:
            async for event in proc.events():
                self._take(shard, event)
        except Exception as exc:
            error = exc
        finally:
            self.finished.add(shard.index)
            self._out.put_nowait(_MemberEnded(error))

    def _take(self, shard: Shard, event: LoadgenEvent) -> None:
        # The shard's state is kept as plain JSON objects (split.Shard): each event is copied in.
        if event["event"] == "run_start":
            shard.run_start = dict(event)
        elif event["event"] == "run_end":
            shard.run_end = dict(event)
        elif event["event"] == "warmed_up":
            self.warmed_up.add(shard.index)
        elif event["event"] == "measure_start":
            warmed_at = event.get("warmed_at")
            shard.warmed_at = float(warmed_at) if isinstance(warmed_at, int | float) else None
        elif event["event"] == "level_summary":
            shard.summary = dict(event.get("summary") or {})
            if isinstance(shard.summary.get("anchor"), dict):
                shard.anchor = ClockAnchor(**shard.summary["anchor"])
        elif event["event"] == "sample":
            shard.last_sample = dict(event)
            self._fresh.add(shard.index)
            if self._fresh >= {s.index for s in self.shards}:
                self._out.put_nowait(self._combined_sample())
        elif event["event"] == "level_error":
            self._out.put_nowait(event)

    def _combined_sample(self) -> LoadgenEvent:
        self._fresh.clear()
        latest = [s.last_sample for s in self.shards if s.last_sample is not None]
        sample = combine_samples(latest, concurrency=self.concurrency)
        # The combined figures keep the shards' keys and order; checked as a sample event.
        return check_event({**sample, "event": "sample", "level_index": self.index})

    def terminate(self) -> None:
        for proc in self.procs:
            proc.terminate()

    def kill(self) -> None:
        for proc in self.procs:
            proc.kill()

    async def ended(self, *, wait: float, grace: float) -> int:
        """Each shard's exit code (and the worker that ran it), one shard after the other;
        the first that is not 0, or 0."""
        for shard, proc in zip(self.shards, self.procs, strict=True):
            shard.exit_code = await proc.ended(wait=wait, grace=grace)
            if isinstance(proc, RemoteShardProcess):
                shard.worker_id = proc.worker_id
        return next((s.exit_code for s in self.shards if s.exit_code), 0)

    async def closed(self) -> None:
        """Wait for every member's reader (the processes are stopped or killed by then)."""
        await asyncio.gather(*self._readers, return_exceptions=True)

    def stderr_text(self) -> str:
        return "\n".join(text for proc in self.procs if (text := proc.stderr_text()))
