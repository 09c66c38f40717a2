from __future__ import annotations

import asyncio
import itertools
from typing import Any

from benchlib.loadgen.apis import Api
from benchlib.loadgen.level import RunnerSample, run_level
from benchlib.loadgen.level_config import LevelConfig
from benchlib.loadgen.metrics import summarize_level
from benchlib.loadgen.prompts import SyntheticPrompts
from benchlib.loadgen.steady import steady_window
from tests.benchlib.loadgen.conftest import stall_bound_s
from tests.benchlib.loadgen.stub_server import StubConfig, StubServer


def config(server: StubServer, **kw) -> LevelConfig:
    base: dict[str, Any] = {
        "api": Api.COMPLETIONS,
        "base_url": server.base_url,
        "model": "stub",
        "concurrency": 4,
        "num_requests": 40,
        "max_tokens": 10,
        "sample_interval": 0.1,
    }
    return LevelConfig(**(base | kw))


async def test_closed_loop_keeps_exactly_c_requests_in_flight():
    async with StubServer(StubConfig(chunk_delay=0.005)) as stub:
        cfg = config(stub, concurrency=5, warmup_requests=3, num_requests=50, max_tokens=20)
        result = await run_level(cfg, SyntheticPrompts(16))
    assert result.status == "completed"
    assert len(result.records) == 50
    assert len(result.warmup_records) == 3
    assert stub.state.max_in_flight == 5
    # Each worker hands its slot to its next request at once: the gap is the event loop's turn,
    # so it is bounded by the loop's own measured lag (a loaded machine delays every turn alike)
    # rather than by a fixed share of the level.
    woken_late_s = stall_bound_s(result.client)
    handoffs: list[float] = []
    for slot in range(5):
        mine = sorted((r for r in result.records if r.slot == slot), key=lambda r: r.start)
        handoffs.extend(b.start - a.end for a, b in itertools.pairwise(mine))
    assert handoffs and min(handoffs) >= 0
    assert max(handoffs) <= 0.002 + woken_late_s, (max(handoffs), woken_late_s)
    # the client's own records: the steady window is at C, and its mean in flight
    # falls short of C by no more than the hand-offs inside it
    _, level, reached = steady_window([(r.start, r.end) for r in result.records], 5)
    assert reached and level == 5
    steady = summarize_level(result.records, concurrency=5)["steady"]
    assert steady["mean_in_flight"] >= 5 - sum(handoffs) / steady["duration_s"] - 1e-9


async def test_every_request_has_a_unique_id_sent_as_header(stub):
    result = await run_level(config(stub, warmup_requests=2), SyntheticPrompts(16))
    ids = [r.request_id for r in result.warmup_records + result.records]
    assert len(set(ids)) == len(ids) == 42
    assert sorted(stub.state.request_ids) == sorted(ids)


async def test_concurrency_above_httpx_default_pool_is_not_capped():
    async with StubServer(StubConfig(chunk_delay=0.01, first_delay=0.05)) as server:
        cfg = config(server, concurrency=120, num_requests=240, max_tokens=5)
        result = await run_level(cfg, SyntheticPrompts(4))
    assert result.status == "completed"
    assert all(r.ok for r in result.records)
    assert server.state.max_in_flight == 120


async def test_request_bodies_carry_the_sampling_parameters(stub):
    cfg = config(
        stub,
        num_requests=3,
        ignore_eos=True,
        temperature=0.0,
        extra_body={"top_k": 5, "stream_options": {"extra": 1}},
    )
    await run_level(cfg, SyntheticPrompts(8))
    body = stub.state.bodies[0]
    assert body["max_tokens"] == 10
    assert body["ignore_eos"] is True
    assert body["temperature"] == 0.0
    assert body["top_k"] == 5
    assert body["stream"] is True
    assert body["stream_options"] == {
        "include_usage": True,
        "continuous_usage_stats": True,
        "extra": 1,
    }
    assert len(body["prompt"].split()) == 8


async def test_duration_mode_stops_issuing_after_the_deadline(stub):
    cfg = config(stub, num_requests=None, duration=0.5)
    result = await run_level(cfg, SyntheticPrompts(8))
    assert result.status == "completed"
    assert result.records
    last_start = max(r.start for r in result.records)
    first_start = min(r.start for r in result.records)
    # nothing is issued after the deadline; a start stamped late by a stalled loop is measured
    woken_late_s = stall_bound_s(result.client)
    assert last_start - first_start < 0.55 + woken_late_s


async def test_poisson_mode_sends_the_requested_count(stub):
    cfg = config(stub, request_rate=200.0, concurrency=50, num_requests=60)
    result = await run_level(cfg, SyntheticPrompts(8))
    assert result.status == "completed"
    assert len(result.records) == 60
    s = summarize_level(result.records, concurrency=50, mode=result.mode)
    assert s["mode"] == "rate"
    rate = s["request_rate"]
    assert rate is not None and 50 < rate < 1000


async def test_live_samples_report_counts_and_client_health(stub):
    samples: list[RunnerSample] = []
    cfg = config(stub, num_requests=None, duration=0.6, sample_interval=0.1)
    result = await run_level(cfg, SyntheticPrompts(8), on_sample=samples.append)
    assert len(samples) >= 4
    s = samples[-1]
    assert s["in_flight"] <= 4
    assert s["completed"] > 0
    assert s["tok_s"] > 0
    assert s["ttft_p50"] is not None
    assert {"loop_lag_ms", "client_cpu", "client_limited", "t"} <= s.keys()
    assert result.client["loop_lag_ms"]["count"] > 0
    assert isinstance(result.client["client_limited"], bool)


async def test_cancel_cuts_in_flight_requests_and_marks_the_level_partial():
    async with StubServer(StubConfig(chunk_delay=0.05)) as server:
        cancel = asyncio.Event()
        cfg = config(server, num_requests=1000, max_tokens=100)
        task = asyncio.create_task(run_level(cfg, SyntheticPrompts(8), cancel=cancel))
        await asyncio.sleep(0.3)
        cancel.set()
        result = await asyncio.wait_for(task, 5)
    assert result.status == "cancelled"
    assert result.partial
    cancelled = [r for r in result.records if r.error_kind == "cancelled"]
    assert len(cancelled) == 4
    assert all(r.chunk_tokens for r in cancelled)  # cut mid-stream
    s = summarize_level(result.records, concurrency=4, partial=True)
    assert s["partial"] and s["requests"]["errors_by_cause"] == {"cancelled": 4}


async def test_cancel_with_drain_lets_in_flight_requests_finish():
    async with StubServer(StubConfig(chunk_delay=0.01)) as server:
        cancel = asyncio.Event()
        cfg = config(server, num_requests=1000, max_tokens=20, drain_seconds=5.0)
        task = asyncio.create_task(run_level(cfg, SyntheticPrompts(8), cancel=cancel))
        await asyncio.sleep(0.3)
        cancel.set()
        result = await asyncio.wait_for(task, 5)
    assert result.status == "cancelled"
    assert result.records and all(r.ok for r in result.records)


async def test_server_dying_mid_level_fails_the_level_with_a_reason():
    server = await StubServer(StubConfig(chunk_delay=0.01)).start()
    cfg = config(server, num_requests=100_000, max_tokens=20)
    task = asyncio.create_task(run_level(cfg, SyntheticPrompts(8)))
    # die once some requests have completed (a closed-loop slot sent its next one), however slow
    # the machine is
    deadline = asyncio.get_running_loop().time() + 30
    while len(server.state.request_ids) <= cfg.concurrency:
        assert asyncio.get_running_loop().time() < deadline, "no request completed"
        await asyncio.sleep(0.02)
    await server.stop()
    result = await asyncio.wait_for(task, 30)
    assert result.status == "failed"
    assert "connection" in (result.reason or "")
    kinds = {r.error_kind for r in result.records}
    assert None in kinds  # what completed before the death is kept
    assert "connect" in kinds


async def test_continue_policy_runs_the_level_to_its_end_despite_errors():
    async with StubServer() as server:
        port = server.port
    cfg = LevelConfig(
        api=Api.COMPLETIONS,
        base_url=f"http://127.0.0.1:{port}",
        model="m",
        concurrency=2,
        num_requests=6,
        on_server_error="continue",
    )
    result = await run_level(cfg, SyntheticPrompts(4))
    assert result.status == "completed"
    assert [r.error_kind for r in result.records] == ["connect"] * 6
