"""The per-host manager: batches on the GPU tick, scrapes READY instances, ends when unneeded."""

from __future__ import annotations

import asyncio
from pathlib import Path

from hosts.lifecycle.remote import with_host_env
from hosts.telemetry.conf import TelemetrySettings
from hosts.telemetry.manager import HostTelemetry
from hosts.telemetry.probes import Sample
from hosts.telemetry.selectors import HostPlan, ScrapeTarget
from hosts.telemetry.targets import HostTarget
from hosts.transports.local import LocalTransport
from tests.hosts.lifecycle.conftest import SIM_BIN


class FakeStore:
    """Records batches; the plan is whatever the test sets."""

    def __init__(self, plan: HostPlan) -> None:
        self.current = plan
        self.batches: list[list[Sample]] = []

    async def plan(self, host_id: int) -> HostPlan:
        return self.current

    async def record(self, host_id: int, samples: list[Sample], plan: HostPlan) -> None:
        self.batches.append(samples)

    async def prune(self, host_id: int, now: float, thinned_until: float | None) -> float:
        return now


def _target(state: Path) -> HostTarget:
    env = {"SPECDASH_SIM_STATE_DIR": str(state), "SPECDASH_SIM_GPU_COUNT": "2"}
    return HostTarget(
        host_id=1, local=True, transport=LocalTransport(),
        wrap=lambda argv: with_host_env(argv, path_prepend=str(SIM_BIN), env=env),
    )  # fmt: skip


PLAN_NEEDED = HostPlan(needed=True, scrape=(), sweep_ids={}, host_sweep_id=None)
FAST = TelemetrySettings(gpu_interval_ms=200, host_interval_s=0.2, linger_s=0.5)


async def test_each_gpu_tick_closes_a_batch_with_what_was_buffered(tmp_path: Path) -> None:
    store = FakeStore(PLAN_NEEDED)
    runner = HostTelemetry(_target(tmp_path), conf=FAST, store=store)
    stop = asyncio.Event()
    task = asyncio.create_task(runner.run(stop))
    async with asyncio.timeout(30):
        while sum(s.kind == "gpu" for b in store.batches for s in b) < 5:
            await asyncio.sleep(0.05)
    stop.set()
    result = await asyncio.wait_for(task, 10)
    assert result["outcome"] == "cancelled" and result["gpu_stream_starts"] == 1
    # The tick sends a batch on its way: one tick per batch, once the stream's size is known
    # (the first tick is only known complete when the second starts).
    assert all(sum(s.kind == "gpu" for s in batch) <= 1 for batch in store.batches[1:])
    assert any(s.kind == "host" for b in store.batches for s in b)


async def test_the_probes_end_after_the_linger_once_nothing_needs_the_host(tmp_path: Path) -> None:
    store = FakeStore(PLAN_NEEDED)
    runner = HostTelemetry(_target(tmp_path), conf=FAST, store=store)
    task = asyncio.create_task(runner.run(asyncio.Event()))
    async with asyncio.timeout(30):
        while not store.batches:
            await asyncio.sleep(0.05)
    store.current = HostPlan(needed=False, scrape=(), sweep_ids={}, host_sweep_id=None)
    result = await asyncio.wait_for(task, 15)
    assert result["outcome"] == "not needed"


async def test_ready_instances_are_scraped_and_dropped_when_they_leave_the_plan(
    tmp_path: Path,
) -> None:
    plan = HostPlan(needed=True, scrape=(ScrapeTarget(7, "http://127.0.0.1:9/metrics"),),
                    sweep_ids={}, host_sweep_id=None)  # fmt: skip
    store = FakeStore(plan)
    runner = HostTelemetry(_target(tmp_path), conf=FAST, store=store)
    task = asyncio.create_task(runner.run(asyncio.Event()))
    async with asyncio.timeout(10):
        while not runner._scrapers:
            await asyncio.sleep(0.02)
    assert list(runner._scrapers) == [(7, None)]
    store.current = PLAN_NEEDED
    async with asyncio.timeout(10):
        while runner._scrapers:
            await asyncio.sleep(0.05)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
