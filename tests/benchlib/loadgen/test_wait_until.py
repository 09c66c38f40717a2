"""The open-loop phases' wait for an arrival's time (`arrivals.wait_until`): never early, and never
holding the loop (other requests' I/O runs while it waits)."""

from __future__ import annotations

import asyncio
import time

from benchlib.loadgen.arrivals import wait_until


def test_it_never_returns_before_its_time() -> None:
    async def main() -> list[float]:
        early = []
        for i in range(40):
            due = time.perf_counter() + 0.0005 * (i % 7)
            await wait_until(due)
            early.append(due - time.perf_counter())
        return early

    assert max(asyncio.run(main())) <= 0.0


def test_other_tasks_run_while_it_waits_through_its_last_stretch() -> None:
    # Within the lead before its time it yields rather than sleeps: a task that yields too
    # keeps running through that stretch.
    async def main() -> int:
        turns = 0
        stop = False

        async def other() -> None:
            nonlocal turns
            while not stop:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(other())
        await asyncio.sleep(0)
        before = turns
        await wait_until(time.perf_counter() + 0.001)
        stop = True
        await task
        return turns - before

    assert asyncio.run(main()) > 1


def test_a_past_time_returns_without_giving_up_the_loop() -> None:
    # An arrival already late goes out at once: nothing else runs in between.
    async def main() -> int:
        turns = 0

        async def other() -> None:
            nonlocal turns
            turns += 1

        task = asyncio.create_task(other())
        await wait_until(time.perf_counter() - 1.0)
        seen = turns
        await task
        return seen

    assert asyncio.run(main()) == 0
