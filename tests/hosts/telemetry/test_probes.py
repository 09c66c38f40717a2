"""The probes against fake and real transports: restarts, /proc over a command, scrapes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from hosts.lifecycle.remote import with_host_env
from hosts.telemetry.nvidia_smi import gpu_query_argv
from hosts.telemetry.probes import (
    GpuStreamProbe,
    RemoteHostProbe,
    Sample,
    ServerMetricsProbe,
    gpu_query_once,
    server_sample_data,
)
from hosts.telemetry.prometheus import parse_engine_metrics
from hosts.transports.base import CommandResult, LineStream, Transport
from hosts.transports.local import LocalTransport
from tests.hosts.lifecycle.conftest import SIM_BIN

DATA = Path(__file__).parent / "data"
ROW = "{i}, GPU-{i}, NVIDIA H100, 81559, {used}, 0, {util}, 70.5, 40"


class ScriptedTransport(Transport):
    """Each stream() call plays the next script of lines, then ends; records the argv."""

    def __init__(self, scripts: list[list[str]]) -> None:
        self.scripts = scripts
        self.streams: list[list[str]] = []

    async def run(self, argv: Sequence[str], *, timeout: float, stdin: bytes | None = None,
                  check: bool = True) -> CommandResult:  # fmt: skip
        raise NotImplementedError

    def stream(self, argv: Sequence[str], *, stdin: bytes | None = None) -> Any:
        return self._stream(list(argv))

    @asynccontextmanager
    async def _stream(self, argv: list[str]) -> AsyncIterator[LineStream]:
        self.streams.append(argv)
        script = self.scripts.pop(0) if self.scripts else []

        async def lines() -> AsyncIterator[str]:
            for line in script:
                yield line
            await asyncio.sleep(0)

        stream = LineStream(lines(), lambda: None, argv)
        yield stream
        stream.returncode = 1

    def command_line(self, argv: Sequence[str], *, stdin: bool = False) -> list[str]:
        return list(argv)

    def label(self) -> str:
        return "scripted"


def _tick(used: int, gpus: int = 2) -> list[str]:
    return [ROW.format(i=i, used=used + i, util=50) for i in range(gpus)]


async def test_gpu_stream_restarts_after_it_breaks_and_drops_the_half_line() -> None:
    first = [*_tick(1000), *_tick(1100), "0, GPU-0, NVIDIA H1"]  # cut mid-line
    second = [*_tick(2000), *_tick(2100)]
    transport = ScriptedTransport([first, second])
    samples: list[Sample] = []
    probe = GpuStreamProbe(transport, gpu_query_argv(500), sink=samples.append,
                           backoff=(0.0,))  # fmt: skip
    task = asyncio.create_task(probe.run())
    while len(samples) < 4:
        await asyncio.sleep(0.01)
    task.cancel()
    used = [s.data["used"] for s in samples[:4]]
    assert used == [[1000, 1001], [1100, 1101], [2000, 2001], [2100, 2101]]
    assert all(s.kind == "gpu" and s.data["index"] == [0, 1] for s in samples)
    assert transport.streams[0] == gpu_query_argv(500) and probe.stats.starts >= 2


async def test_a_stream_that_keeps_failing_backs_off_longer_each_time() -> None:
    delays: list[float] = []

    async def record(seconds: float) -> None:
        delays.append(seconds)
        await asyncio.sleep(0)

    # Streams that end at once with nothing: every restart waits longer, up to the last step.
    probe = GpuStreamProbe(ScriptedTransport([]), ["nvidia-smi"], sink=lambda s: None,
                           backoff=(0.01, 0.05, 0.2), sleep=record)  # fmt: skip
    task = asyncio.create_task(probe.run())
    while len(delays) < 5:
        await asyncio.sleep(0.001)
    task.cancel()
    assert delays[:5] == [0.01, 0.05, 0.2, 0.2, 0.2]


async def test_gpu_stream_of_the_simulator_stand_in_through_the_host_wrapper(
    tmp_path: Path,
) -> None:
    argv = with_host_env(
        gpu_query_argv(100),
        path_prepend=str(SIM_BIN),
        env={"SPECDASH_SIM_STATE_DIR": str(tmp_path), "SPECDASH_SIM_GPU_COUNT": "8"},
    )
    samples: list[Sample] = []
    probe = GpuStreamProbe(LocalTransport(), argv, sink=samples.append)
    task = asyncio.create_task(probe.run())
    try:
        async with asyncio.timeout(30):
            while len(samples) < 3:
                await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert probe.stats.starts == 1
    assert all(s.data["index"] == list(range(8)) for s in samples)
    assert all(s.data["used"] == [0] * 8 and s.data["total"][0] > 0 for s in samples)
    once = await gpu_query_once(LocalTransport(), with_host_env(
        gpu_query_argv(), path_prepend=str(SIM_BIN),
        env={"SPECDASH_SIM_STATE_DIR": str(tmp_path), "SPECDASH_SIM_GPU_COUNT": "8"}))  # fmt: skip
    assert len(once.gpus) == 8 and not once.skipped_lines


async def test_remote_host_load_comes_from_proc_over_one_long_lived_command() -> None:
    samples: list[Sample] = []
    probe = RemoteHostProbe(LocalTransport(), sink=samples.append, interval_s=0.2)
    task = asyncio.create_task(probe.run())
    try:
        async with asyncio.timeout(30):
            while len(samples) < 2:
                await asyncio.sleep(0.05)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert probe.stats.starts == 1
    first = samples[0].data
    assert 0.0 <= first["cpu"] <= 100.0 and first["cpus"] >= 1
    assert 0 < first["mem_used"] < first["mem_total"] and first["load1"] >= 0


def _sglang(verify: int, generated: int, requests: int, running: int) -> str:
    # SGLang 0.5.23's names (srt/metrics/collector.py): verify calls are its only spec counter.
    return "\n".join([
        f'sglang:num_running_reqs{{tp_rank="0"}} {running}',
        f'sglang:num_running_reqs{{tp_rank="1"}} {running}',
        'sglang:num_queue_reqs{tp_rank="0"} 2',
        'sglang:spec_accept_length{tp_rank="0"} 9.0',
        f"sglang:spec_verify_calls_total {verify}",
        f"sglang:generation_tokens_total {generated}",
        f'sglang:num_requests_total{{is_streaming="true"}} {requests}',
        "",
    ])  # fmt: skip


def test_server_sample_takes_accept_length_from_the_counters_between_two_scrapes() -> None:
    before = parse_engine_metrics(_sglang(100, 300, 10, 4), scraped_at=1.0)
    after = parse_engine_metrics(_sglang(300, 830, 20, 5), scraped_at=2.0)
    data = server_sample_data(before, after)
    # (530 - 10) / 200, not the gauge (9.0) nor the lifetime (830 - 20) / 300.
    assert data["accept_length"] == pytest.approx(2.6)
    assert (data["running"], data["queued"]) == (5, 2)
    # Nothing drafted in an interval: no accept length rather than a stale one.
    assert server_sample_data(after, after)["accept_length"] is None
    # The first scrape has no interval yet: the engine's gauge stands in.
    assert server_sample_data(None, after)["accept_length"] == 9.0


async def test_scrape_failures_are_kept_as_the_reason_and_emit_nothing() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    samples: list[Sample] = []
    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as client:
        probe = ServerMetricsProbe(client, "http://x/metrics", instance_id=3, sink=samples.append)
        assert await probe.scrape_once() is None
    assert samples == [] and "refused" in probe.last_error


async def test_scrapes_of_a_server_become_server_samples_of_its_instance() -> None:
    texts = iter([(DATA / "sglang_scrape1.prom").read_text(),
                  (DATA / "sglang_scrape2.prom").read_text()])  # fmt: skip

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=next(texts))

    samples: list[Sample] = []
    clock = iter([10.0, 11.0])
    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        probe = ServerMetricsProbe(client, "http://x/metrics", instance_id=3,
                                   sink=samples.append, clock=lambda: next(clock))  # fmt: skip
        await probe.scrape_once()
        await probe.scrape_once()
    assert [(s.kind, s.instance_id, s.t) for s in samples] == [("server", 3, 10.0),
                                                                ("server", 3, 11.0)]  # fmt: skip
    assert samples[1].data["running"] is not None
