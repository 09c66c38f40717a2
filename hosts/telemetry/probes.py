"""Probes: long-lived loops that turn a host's GPUs, load and servers into `Sample`s.

Nothing here touches Django: a probe gets a transport and an argv (already wrapped with the
host's PATH and environment by the caller), and hands each sample to a `sink` callback. The
manager (hosts/telemetry/manager.py) decides which probes run and persists what they emit.

- `GpuStreamProbe`: one streaming `nvidia-smi --query-gpu=... -lms N` per host over the
  transport (one ssh session for the whole run, not one per sample); a broken stream is
  restarted with backoff and the assembler told, so a half line never glues onto the next.
- `LocalHostProbe` (psutil) for the dashboard machine, `RemoteHostProbe` for the others: one
  streaming shell loop that prints /proc/stat, /proc/meminfo and /proc/loadavg every interval.
- `ServerMetricsProbe`: the instance's Prometheus endpoint scraped with httpx every interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

import httpx

from hosts.telemetry.deltas import generation_throughput, interval_between
from hosts.telemetry.hostload import (
    HostLoadSample,
    LocalHostSampler,
    ProcStat,
    cpu_utilisation,
    parse_loadavg,
    parse_meminfo,
    parse_proc_stat,
)
from hosts.telemetry.nvidia_smi import (
    GpuQueryResult,
    GpuSample,
    GpuStreamAssembler,
    gpu_query_argv,
    parse_gpu_query,
)
from hosts.telemetry.prometheus import EngineMetrics, MetricsParseError, parse_engine_metrics
from hosts.transports.base import LineStream, Transport, TransportError

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
# Seconds to wait before restarting a broken stream: the next one after each failure in a
# row, back to the first once a restarted stream has produced samples again.
BACKOFF_S: tuple[float, ...] = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class HostSampleData(TypedDict):
    cpu: float  # busy percent over all CPUs, one decimal
    cpus: int
    mem_used: int  # bytes
    mem_total: int  # bytes
    load1: float


class ServerSampleData(TypedDict):
    """A server's live figures (None where its engine does not export them)."""

    running: float | None
    queued: float | None
    gen_tps: float | None
    kv: float | None
    accept_length: float | None
    accept_rate: float | None


@dataclass(frozen=True)
class Sample:
    kind: str  # "gpu" | "host" | "server"
    t: float  # epoch seconds on the dashboard's clock, when the probe got it
    # The probe's reading for its kind (gpu_sample_data's parallel lists, a HostSampleData, a
    # ServerSampleData), as its JSON column stores it and chart code reads it back.
    data: dict[str, Any]
    instance_id: int | None = None
    # Known when the probe runs for one sweep only (an endpoint's server scrape): the row is
    # kept with that sweep whatever else runs on the host.
    sweep_id: int | None = None


Sink = Callable[[Sample], None]


def gpu_sample_data(gpus: Sequence[GpuSample]) -> dict[str, list[Any]]:
    """All GPUs of one tick as parallel lists (compact rows, and what the charts extend)."""
    ordered = sorted(gpus, key=lambda gpu: gpu.index)
    return {
        "index": [gpu.index for gpu in ordered],
        "used": [gpu.memory_used_mib for gpu in ordered],
        "total": [gpu.memory_total_mib for gpu in ordered],
        "util": [gpu.utilization_pct for gpu in ordered],
        "power": [gpu.power_w for gpu in ordered],
        "temp": [gpu.temperature_c for gpu in ordered],
    }


def host_sample_data(sample: HostLoadSample) -> HostSampleData:
    return {
        "cpu": round(sample.cpu_busy_pct, 1),
        "cpus": sample.cpu_count,
        "mem_used": sample.memory.used_bytes,
        "mem_total": sample.memory.total_bytes,
        "load1": sample.load.load1,
    }


def server_sample_data(before: EngineMetrics | None, after: EngineMetrics) -> ServerSampleData:
    """The live server figures; accept length over the last scrape interval where possible."""
    accept_length = after.spec_accept_length
    accept_rate = after.spec_accept_rate
    if before is not None:
        # Where the counters exist they define the figure (None when nothing was drafted).
        step = interval_between(before, after)
        if step.spec_drafts is not None:
            accept_length = step.accept_length
        if step.spec_draft_tokens is not None:
            accept_rate = step.acceptance_rate
    return {
        "running": after.running_requests,
        "queued": after.queued_requests,
        "gen_tps": generation_throughput(before, after),
        "kv": after.kv_usage,
        "accept_length": accept_length,
        "accept_rate": accept_rate,
    }


@dataclass
class _Backoff:
    delays: tuple[float, ...] = BACKOFF_S
    failures: int = 0

    def next_delay(self, *, produced: bool) -> float:
        if produced:
            self.failures = 0
        delay = self.delays[min(self.failures, len(self.delays) - 1)]
        self.failures += 1
        return delay


@dataclass
class StreamStats:
    starts: int = 0
    samples: int = 0
    last_error: str = ""
    restarts_at: list[float] = field(default_factory=list)


class _RestartingStream:
    """A long-lived command over the transport, read until it ends and then restarted with
    backoff, until cancelled. Subclasses read its lines (`_read`) and say what a stream's end
    is called (`_exit_note`) and what follows it before the next (`_ended`)."""

    def __init__(
        self,
        transport: Transport,
        argv: Sequence[str],
        *,
        sink: Sink,
        clock: Clock,
        backoff: tuple[float, ...],
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.transport = transport
        self.argv = list(argv)
        self.sink = sink
        self.clock = clock
        self.backoff = _Backoff(backoff)
        self.sleep = sleep
        self.stats = StreamStats()

    async def run(self) -> None:
        while True:
            produced = await self._one_stream()
            await self.sleep(self._ended(produced=produced))

    async def _one_stream(self) -> bool:
        """One stream, start to end; whether it produced a sample."""
        self.stats.starts += 1
        before = self.stats.samples
        try:
            async with self.transport.stream(self.argv) as lines:
                await self._read(lines)
            self.stats.last_error = self._exit_note(lines)
        except TransportError as exc:
            self.stats.last_error = str(exc)
        return self.stats.samples > before

    async def _read(self, lines: LineStream) -> None:
        raise NotImplementedError

    def _exit_note(self, lines: LineStream) -> str:
        return f"exit {lines.returncode}"

    def _ended(self, *, produced: bool) -> float:
        """The wait before the next stream."""
        return self.backoff.next_delay(produced=produced)


class GpuStreamProbe(_RestartingStream):
    """One `nvidia-smi -lms` stream per host, restarted with backoff until cancelled."""

    def __init__(
        self,
        transport: Transport,
        argv: Sequence[str],
        *,
        sink: Sink,
        clock: Clock = time.time,
        backoff: tuple[float, ...] = BACKOFF_S,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        super().__init__(transport, argv, sink=sink, clock=clock, backoff=backoff, sleep=sleep)
        self.assembler = GpuStreamAssembler()

    @staticmethod
    def default_argv(interval_ms: int) -> list[str]:
        return gpu_query_argv(interval_ms)

    async def _read(self, lines: LineStream) -> None:
        async for line in lines:
            for tick in self.assembler.feed_line(line):
                self._emit(tick.gpus)

    def _exit_note(self, lines: LineStream) -> str:
        stderr = lines.stderr.decode("utf-8", "replace").strip()[-300:]
        detail = f": {stderr}" if stderr else ""
        return f"exit {lines.returncode}{detail}"

    def _ended(self, *, produced: bool) -> float:
        # A tick cut short by the stream's end is emitted now, so it never glues onto the next.
        for tick in self.assembler.restart():
            self._emit(tick.gpus)
        delay = self.backoff.next_delay(produced=produced)
        self.stats.restarts_at.append(self.clock())
        logger.info("GPU stream ended (%s); restarting in %.1fs", self.stats.last_error, delay)
        return delay

    def _emit(self, gpus: Sequence[GpuSample]) -> None:
        if not gpus:
            return
        self.stats.samples += 1
        self.sink(Sample(kind="gpu", t=self.clock(), data=gpu_sample_data(gpus)))


async def gpu_query_once(
    transport: Transport,
    argv: Sequence[str],
    *,
    timeout: float = 15.0,  # noqa: ASYNC109 - passed to the transport, which kills the process
) -> GpuQueryResult:
    """One `--query-gpu` call, parsed by the same code as the stream."""
    result = await transport.run(argv, timeout=timeout)
    return parse_gpu_query(result.stdout_text)


class LocalHostProbe:
    """The dashboard machine's load from psutil, every `interval_s`."""

    def __init__(self, *, sink: Sink, interval_s: float = 1.0, clock: Clock = time.time) -> None:
        self.sink = sink
        self.interval_s = interval_s
        self.sampler = LocalHostSampler(clock)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            sample = self.sampler.sample()
            self.sink(Sample(kind="host", t=sample.at, data=dict(host_sample_data(sample))))


# A constant script (never built from input); the interval arrives as "$1".
_HOSTLOAD_SCRIPT = (
    "while :; do cat /proc/stat; echo @@meminfo; cat /proc/meminfo; echo @@loadavg; "
    'cat /proc/loadavg; echo @@end; sleep "$1" || exit 0; done'
)


def hostload_argv(interval_s: float) -> list[str]:
    return ["sh", "-c", _HOSTLOAD_SCRIPT, "specdash-hostload", f"{interval_s:g}"]


class RemoteHostProbe(_RestartingStream):
    """A remote host's load read from /proc over one long-lived command (nothing to install)."""

    def __init__(
        self,
        transport: Transport,
        *,
        sink: Sink,
        interval_s: float = 1.0,
        clock: Clock = time.time,
        backoff: tuple[float, ...] = BACKOFF_S,
    ) -> None:
        super().__init__(
            transport, hostload_argv(interval_s), sink=sink, clock=clock, backoff=backoff
        )
        self._previous: ProcStat | None = None

    async def _read(self, lines: LineStream) -> None:
        # CPU use is the difference between two blocks of one stream, never across streams.
        self._previous = None
        sections: dict[str, list[str]] = {"stat": [], "meminfo": [], "loadavg": []}
        current = "stat"
        async for line in lines:
            if line == "@@end":
                self._block(sections)
                sections = {"stat": [], "meminfo": [], "loadavg": []}
                current = "stat"
            elif line.startswith("@@") and line[2:] in sections:
                current = line[2:]
            else:
                sections[current].append(line)

    def feed_block(self, stat: str, meminfo: str, loadavg: str) -> Sample | None:
        """One block of the three files; a sample from the second block on."""
        try:
            proc = parse_proc_stat(stat)
            memory = parse_meminfo(meminfo)
            load = parse_loadavg(loadavg)
        except ValueError as exc:
            self.stats.last_error = f"unparsable /proc text: {exc}"
            return None
        previous, self._previous = self._previous, proc
        usage = cpu_utilisation(previous, proc) if previous is not None else None
        if usage is None:
            return None
        per_cpu = tuple(usage.per_cpu_busy_pct.values())
        sample = HostLoadSample(
            at=self.clock(),
            cpu_busy_pct=usage.busy_pct,
            per_cpu_busy_pct=per_cpu,
            cpu_count=len(proc.per_cpu) or 1,
            memory=memory,
            load=load,
        )
        out = Sample(kind="host", t=sample.at, data=dict(host_sample_data(sample)))
        self.stats.samples += 1
        self.sink(out)
        return out

    def _block(self, sections: dict[str, list[str]]) -> None:
        self.feed_block(
            "\n".join(sections["stat"]),
            "\n".join(sections["meminfo"]),
            "\n".join(sections["loadavg"]),
        )


async def scrape_metrics(
    client: httpx.AsyncClient, url: str, *, clock: Clock = time.time
) -> EngineMetrics:
    """One `/metrics` scrape; httpx.HTTPError or MetricsParseError when there is none."""
    response = await client.get(url)
    response.raise_for_status()
    return parse_engine_metrics(response.text, scraped_at=clock())


class ServerMetricsProbe:
    """Scrapes one server's Prometheus endpoint every `interval_s` until cancelled: a managed
    instance's (`instance_id`), or an endpoint profile's during one of its sweeps (`sweep_id`,
    no instance)."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        *,
        instance_id: int | None,
        sink: Sink,
        interval_s: float = 1.0,
        clock: Clock = time.time,
        sweep_id: int | None = None,
    ) -> None:
        self.client = client
        self.url = url
        self.instance_id = instance_id
        self.sweep_id = sweep_id
        self.sink = sink
        self.interval_s = interval_s
        self.clock = clock
        self.last_error = ""
        self._previous: EngineMetrics | None = None

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            await self.scrape_once()
            next_at += self.interval_s
            # A slow scrape does not make the next ones pile up.
            next_at = max(next_at, loop.time())
            await asyncio.sleep(next_at - loop.time())

    async def scrape_once(self) -> Sample | None:
        try:
            metrics = await scrape_metrics(self.client, self.url, clock=self.clock)
        except (httpx.HTTPError, MetricsParseError) as exc:
            self.last_error = str(exc) or type(exc).__name__
            return None
        previous, self._previous = self._previous, metrics
        if previous is not None and previous.engine != metrics.engine:
            previous = None
        sample = Sample(
            kind="server",
            t=metrics.scraped_at,
            data=dict(server_sample_data(previous, metrics)),
            instance_id=self.instance_id,
            sweep_id=self.sweep_id,
        )
        self.sink(sample)
        return sample


async def cancel_all(tasks: Sequence[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
