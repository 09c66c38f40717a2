"""Load-generator events to recording services.

``SweepRecorder.handle`` takes each event line as it arrives: a level start or summary is
persisted at once (after the samples buffered before it, so the order is kept), samples are
buffered and written plus broadcast as one batch about once a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol, cast

from benchlib.loadgen.events import LoadgenEvent, RunEndEvent, RunStartEvent, SampleEvent
from benchlib.loadgen.summary import LevelSummary
from benchmarks.sweeps.store import ServiceStore
from core import realtime


class SweepStore(Protocol):
    """Where a recorder writes; the default (``store.ServiceStore``) goes through the recording
    services."""

    async def level_started(
        self, *, sweep_id: int, index: int, concurrency: int, t: float
    ) -> None: ...

    async def level_finished(self, *, sweep_id: int, summary: LevelSummary) -> None: ...

    async def samples_add(self, *, sweep_id: int, samples: list[SampleEvent]) -> None: ...


class SweepRecorder:
    def __init__(
        self,
        sweep_id: int,
        *,
        store: SweepStore | None = None,
        batch_seconds: float = realtime.SAMPLE_BATCH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sweep_id = sweep_id
        self.store: SweepStore = store if store is not None else ServiceStore()
        self.batch_seconds = batch_seconds
        self.clock = clock
        self.run_start: RunStartEvent | None = None
        self.run_end: RunEndEvent | None = None
        self.level_errors: list[str] = []
        self.levels_finished = 0
        self.current_level: int | None = None
        self._samples: list[SampleEvent] = []
        self._last_flush = clock()
        # Flushes come from handle() and from the job's ticker: one at a time, in order.
        self._lock = asyncio.Lock()

    async def handle(self, event: LoadgenEvent) -> None:
        if event["event"] == "sample":
            self._samples.append(event)
            await self.flush_if_due()
        elif event["event"] == "level_start":
            await self.flush()
            self.current_level = int(event["level_index"])
            await self.store.level_started(
                sweep_id=self.sweep_id,
                index=self.current_level,
                concurrency=int(event["concurrency"]),
                t=float(event.get("t") or time.time()),
            )
        elif event["event"] == "level_summary":
            await self.flush()
            # A copy, with its level's index unless it says one; an event without a summary
            # stores an empty one (its columns then read as a level that left no figures).
            summary = cast(LevelSummary, dict(event.get("summary") or {}))
            summary.setdefault("level_index", event["level_index"])
            await self.store.level_finished(sweep_id=self.sweep_id, summary=summary)
            self.levels_finished += 1
            self.current_level = None
        elif event["event"] == "level_error":
            self.level_errors.append(str(event.get("reason") or "level error"))
        elif event["event"] == "run_start":
            self.run_start = event
        elif event["event"] == "run_end":
            await self.flush()
            self.run_end = event

    async def flush_if_due(self) -> None:
        if self._samples and self.clock() - self._last_flush >= self.batch_seconds:
            await self.flush()

    async def flush(self) -> None:
        async with self._lock:
            self._last_flush = self.clock()
            if not self._samples:
                return
            batch, self._samples = self._samples, []
            # The events go as they came (copies: the store keeps no reference to the parsed lines).
            await self.store.samples_add(sweep_id=self.sweep_id, samples=[s.copy() for s in batch])
