"""Who needs which probe, and the long-lived `telemetry.host` job that runs them.

Design (see docs/architecture.md, "Telemetry"): one job per host, kind `telemetry.host`,
lock key `telemetry:host:<id>`, so across all job workers at most one runs per host. It is
queued (if none is queued or running) when a server instance on the host is started, when a
sweep of an endpoint profile registered on the host begins (a server specdash did not start,
sampled as a managed one is), and when a page showing the host's telemetry opens; pages renew
a `TelemetryWatch` while they stay open. The job re-reads its plan every second: the host is
needed while it has an active instance, a running endpoint sweep or an unexpired watch; the
READY instances, and the metrics URLs of endpoints whose sweep runs, are the ones scraped
(an endpoint's rows are kept with its sweep). When nothing has
needed the host for `linger_s` the job ends, and its probes with it.

Batches: the GPU stream's tick is the batch clock. Everything buffered since the previous
batch (the tick, host load, server scrapes) is persisted and broadcast as one event as soon as
a tick arrives, or after a second without one, so a sample reaches the browsers without
waiting out a batching interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NotRequired, Protocol, TypedDict

import httpx

from core.jobs import JobContext, job_handler
from hosts.lifecycle.remote import Agent
from hosts.telemetry import selectors, service, store
from hosts.telemetry.conf import TelemetrySettings
from hosts.telemetry.nvidia_smi import gpu_query_argv
from hosts.telemetry.probes import (
    GpuStreamProbe,
    LocalHostProbe,
    RemoteHostProbe,
    Sample,
    ServerMetricsProbe,
    cancel_all,
    gpu_query_once,
    gpu_sample_data,
)
from hosts.telemetry.targets import HostTarget
from hosts.transports.base import TransportError

logger = logging.getLogger(__name__)

PLAN_INTERVAL_S = 1.0
PRUNE_INTERVAL_S = 300.0
# A batch waits at most this long for the next GPU tick.
MAX_BATCH_WAIT_S = 1.0


class TelemetryStore(Protocol):
    async def plan(self, host_id: int) -> selectors.HostPlan: ...

    async def record(
        self, host_id: int, samples: list[Sample], plan: selectors.HostPlan
    ) -> None: ...

    async def prune(self, host_id: int, now: float, thinned_until: float | None) -> float: ...


class DatabaseStore:
    """The services and selectors, through the telemetry app's async face."""

    async def plan(self, host_id: int) -> selectors.HostPlan:
        return await store.atelemetry_host_plan(host_id=host_id)

    async def record(self, host_id: int, samples: list[Sample], plan: selectors.HostPlan) -> None:
        await store.atelemetry_samples_record(
            host_id=host_id,
            samples=samples,
            sweep_ids=plan.sweep_ids,
            host_sweep_id=plan.host_sweep_id,
        )

    async def prune(self, host_id: int, now: float, thinned_until: float | None) -> float:
        return await store.atelemetry_prune(host_id=host_id, now=now, thinned_until=thinned_until)


class TelemetryResult(TypedDict):
    """A host telemetry job's result: why it ended and, once its probes ran, what they did."""

    outcome: str
    batches: NotRequired[int]  # sample batches written
    gpu_samples: NotRequired[int]
    gpu_stream_starts: NotRequired[int]
    gpu_last_error: NotRequired[str]


@dataclass
class HostTelemetry:
    """The probes of one host and the batches they feed."""

    target: HostTarget
    conf: TelemetrySettings = field(default_factory=TelemetrySettings)
    store: TelemetryStore = field(default_factory=DatabaseStore)
    clock: Callable[[], float] = time.time
    batches: int = 0
    _buffer: list[Sample] = field(default_factory=list)
    _tick: asyncio.Event = field(default_factory=asyncio.Event)
    # keyed by ScrapeTarget.key: (instance id, None) or, for an endpoint's sweep, (None, sweep id)
    _scrapers: dict[tuple[int | None, int | None], tuple[str, asyncio.Task[None]]] = field(
        default_factory=dict
    )

    def add(self, sample: Sample) -> None:
        self._buffer.append(sample)

    def add_gpu(self, sample: Sample) -> None:
        self._buffer.append(sample)
        self._tick.set()

    async def run(self, stop: asyncio.Event) -> TelemetryResult:
        host_id = self.target.host_id
        gpu = GpuStreamProbe(
            self.target.transport,
            self.target.wrap(gpu_query_argv(self.conf.gpu_interval_ms)),
            sink=self.add_gpu,
            clock=self.clock,
        )
        load: LocalHostProbe | RemoteHostProbe = (
            LocalHostProbe(sink=self.add, interval_s=self.conf.host_interval_s, clock=self.clock)
            if self.target.local
            else RemoteHostProbe(
                self.target.transport,
                sink=self.add,
                interval_s=self.conf.host_interval_s,
                clock=self.clock,
            )
        )
        probes = [asyncio.create_task(gpu.run()), asyncio.create_task(load.run())]
        loop = asyncio.get_running_loop()
        plan = await self.store.plan(host_id)
        idle_since: float | None = None
        next_plan = loop.time() + PLAN_INTERVAL_S
        next_prune = loop.time() + 5.0
        thinned: float | None = None
        limits = httpx.Limits(max_keepalive_connections=0)
        timeout = httpx.Timeout(2.0, connect=1.0)
        outcome = "cancelled"
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
            self._sync_scrapers(plan, client)
            try:
                while not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._tick.wait(), MAX_BATCH_WAIT_S)
                    self._tick.clear()
                    await self._flush(plan)
                    now = loop.time()
                    if now >= next_plan:
                        next_plan = now + PLAN_INTERVAL_S
                        plan = await self.store.plan(host_id)
                        idle_since = None if plan.needed else (idle_since or now)
                        if idle_since is not None and now - idle_since >= self.conf.linger_s:
                            outcome = "not needed"
                            break
                        self._sync_scrapers(plan, client)
                    if now >= next_prune:
                        next_prune = now + PRUNE_INTERVAL_S
                        thinned = await self.store.prune(host_id, self.clock(), thinned)
            finally:
                await cancel_all([*probes, *(task for _, task in self._scrapers.values())])
                self._scrapers.clear()
                await self._flush(plan)
        return {
            "outcome": outcome,
            "batches": self.batches,
            "gpu_samples": gpu.stats.samples,
            "gpu_stream_starts": gpu.stats.starts,
            "gpu_last_error": gpu.stats.last_error,
        }

    def _sync_scrapers(self, plan: selectors.HostPlan, client: httpx.AsyncClient) -> None:
        wanted = {t.key: t.metrics_url for t in plan.scrape}
        for key, (url, task) in list(self._scrapers.items()):
            if wanted.get(key) != url:
                task.cancel()
                del self._scrapers[key]
        for key, url in wanted.items():
            if key not in self._scrapers:
                instance_id, sweep_id = key
                probe = ServerMetricsProbe(
                    client,
                    url,
                    instance_id=instance_id,
                    sweep_id=sweep_id,
                    sink=self.add,
                    interval_s=self.conf.scrape_interval_s,
                    clock=self.clock,
                )
                self._scrapers[key] = (url, asyncio.create_task(probe.run()))

    async def _flush(self, plan: selectors.HostPlan) -> None:
        if not self._buffer:
            return
        batch, self._buffer = self._buffer, []
        try:
            await self.store.record(self.target.host_id, batch, plan)
            self.batches += 1
        except Exception:  # a full disk or a locked database must not end the probes
            logger.warning("telemetry batch of host %s dropped", self.target.host_id, exc_info=True)


@job_handler(service.TELEMETRY_JOB)
async def run_host_telemetry(ctx: JobContext) -> TelemetryResult:
    host_id = int(ctx.params["host_id"])
    target = await store.aload_target(host_id)
    if target is None:
        return {"outcome": "no such host"}
    runner = HostTelemetry(target, conf=TelemetrySettings.load())
    return await runner.run(ctx.cancelled)


async def ensure_for_host(host_id: int) -> None:
    """Queue the host's telemetry job if none runs (called when an instance is started and
    when a sweep of an endpoint registered on the host begins)."""
    try:
        await store.atelemetry_host_ensure(host_id=host_id)
    except Exception:
        logger.warning("could not queue telemetry for host %s", host_id, exc_info=True)


# One GPU reading as the telemetry probe parses it: parallel lists by column ("index", "used",
# "total", ...; probes.gpu_sample_data).
GpuReading = dict[str, list[Any]]


async def gpu_record_now(*, agent: Agent, host_id: int, instance_id: int) -> GpuReading | None:
    """One GPU reading through the probe's argv and parser, stored in the host's series.

    The stop path calls it before the stop and after the verification, so the chart shows
    the release even when no stream runs, from the same parser the stream uses.
    """
    try:
        result = await gpu_query_once(agent.transport, agent.wrap(gpu_query_argv()), timeout=15)
    except TransportError as exc:
        logger.info("GPU reading for instance %s failed: %s", instance_id, exc)
        return None
    if not result.gpus:
        return None
    reading = gpu_sample_data(result.gpus)
    sample = Sample(kind="gpu", t=time.time(), data=reading, instance_id=instance_id)
    try:
        await store.atelemetry_samples_record(host_id=host_id, samples=[sample])
    except Exception:
        logger.warning("GPU reading for instance %s not stored", instance_id, exc_info=True)
    return reading
