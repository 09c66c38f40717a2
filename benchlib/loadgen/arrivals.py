"""Open-loop arrivals: when the next request is due (``next_gap``), waking at that time
(``wait_until``), and the capped set of slots the due requests go out on (``OpenLoopSlots``).

Apart from the runner (``level.py``) because the arrival timing is its own concern with its
own measured limits (the wake-up lead below, the gaps' distribution), shared by the fixed-rate
and the trace phases, and testable without a server.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from benchlib.loadgen.records import RequestRecord


def next_gap(rng: random.Random, rate: float, burstiness: float = 1.0) -> float:
    """Seconds to the next arrival: exponential (Poisson arrivals) or gamma with shape
    `burstiness` and the same mean 1 / rate, as vLLM's benchmark client draws them."""
    if burstiness == 1.0:
        return rng.expovariate(rate)
    return rng.gammavariate(burstiness, 1.0 / (rate * burstiness))


# epoll takes its timeout in whole milliseconds, rounded up, so asyncio.sleep(d) wakes up to
# 1 ms after its time: every arrival of a schedule (a trace's offsets, a rate's gaps) went out
# about 1 ms late at the median. Sleep to just before the time, then yield until it: each yield
# still runs every other task's I/O, and the yielding costs at most this lead of CPU per arrival
# (2% of a core at 20 arrivals a second).
_SLEEP_LEAD_S = 0.0015


async def wait_until(due: float) -> None:
    """Return at ``due`` (a ``time.perf_counter()`` value) or as soon after it as the loop can."""
    delay = due - time.perf_counter() - _SLEEP_LEAD_S
    if delay > 0:
        await asyncio.sleep(delay)
    while time.perf_counter() < due:  # noqa: ASYNC110 (a yield until a time, not an event)
        await asyncio.sleep(0)


class OpenLoopSlots:
    """What an open-loop phase (fixed rate or trace) keeps: at most ``concurrency`` requests in
    flight, each on a free slot (a slot is a client's connection), and their tasks until done."""

    def __init__(
        self,
        concurrency: int,
        *,
        send: Callable[[int, RequestRecord, bytes], Awaitable[None]],
        stopping: Callable[[], bool],
    ) -> None:
        self._send = send
        self._stopping = stopping
        self._sem = asyncio.Semaphore(concurrency)
        self._free = list(range(concurrency - 1, -1, -1))
        self._tasks: set[asyncio.Task[None]] = set()

    async def take(self) -> int | None:
        """A free slot, waiting for one when the cap is reached; None once the level stops."""
        await self._sem.acquire()
        if self._stopping():
            self._sem.release()
            return None
        return self._free.pop()

    def send(self, slot: int, rec: RequestRecord, content: bytes) -> None:
        task = asyncio.create_task(self._one(slot, rec, content))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _one(self, slot: int, rec: RequestRecord, content: bytes) -> None:
        try:
            await self._send(slot, rec, content)
        finally:
            self._free.append(slot)
            self._sem.release()

    async def drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
