from __future__ import annotations

# One level of load: a closed loop of C workers (or Poisson arrivals), with a live sampler.
#
# Closed loop: C workers each send their next request as soon as the previous one ends, so C are in
# flight at all times. The level ends after a request count or a duration, on cancel (drained for
# `drain_seconds`, then cut), or when the server-error policy gives up on the server.
import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, NotRequired, TypedDict

from benchlib.loadgen.apis import PATHS
from benchlib.loadgen.arrivals import OpenLoopSlots, next_gap, wait_until
from benchlib.loadgen.client import StreamClient, make_client, send_request
from benchlib.loadgen.health import HealthMonitor, LiveStats, client_limited
from benchlib.loadgen.level_config import LevelConfig, LevelResult, share
from benchlib.loadgen.level_requests import build_request
from benchlib.loadgen.prompts import PromptSource
from benchlib.loadgen.ramp import ramp_rate
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.sessions import Session
from benchlib.stats.intervals import quantile


class RunnerSample(TypedDict):
    """What the level runner hands ``on_sample`` once per sample interval (``_sampler``;
    summed over a split level's processes by ``multiproc``). The command line writes it, less
    ``recent_ttft``, as its ``sample`` event (``events.SampleEvent``) and a progress line."""

    t: float  # epoch seconds
    phase: str  # "warmup" or "measure"
    tok_s: float  # output tokens per second over the interval
    in_flight: int
    completed: int
    errors: int
    ttft_p50: float | None  # seconds, over the recent TTFTs (None: none yet)
    loop_lag_ms: float
    client_cpu: float  # percent of one core
    client_limited: bool
    recent_ttft: list[float]  # seconds, sorted
    processes: NotRequired[int]  # a level split across processes (multiproc)


SampleCallback = Callable[[RunnerSample], None]
# Takes each request's record as it completes (warm-up ones included) and the level's anchor:
# with one, the runner keeps no records, so its memory does not grow with the level.
RecordSink = Callable[[RequestRecord, ClockAnchor], None]


async def _run_workers(workers: Iterable[Coroutine[Any, Any, None]]) -> None:
    """Run the workers together until all end; when the phase is cancelled (or one worker
    raises), cancel the rest and wait for them, so none outlives its phase."""
    tasks = [asyncio.create_task(w) for w in workers]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class LevelRunner:
    def __init__(
        self,
        cfg: LevelConfig,
        prompts: PromptSource,
        *,
        client: StreamClient | None = None,
        cancel: asyncio.Event | None = None,
        on_sample: SampleCallback | None = None,
        sink: RecordSink | None = None,
    ) -> None:
        self.cfg = cfg
        self.sink = sink
        self.anchor = ClockAnchor.now()
        self._completed_warmups = 0
        self._completed_measured = 0
        self.prompts = prompts
        self.client = client
        self.cancel = cancel or asyncio.Event()
        self.on_sample = on_sample
        self.url = cfg.base_url.rstrip("/") + PATHS[cfg.api]
        self.live = LiveStats()
        self.health = HealthMonitor()
        self.failed = asyncio.Event()
        self.reason: str | None = None
        self.stopping = False
        self.phase = "warmup"
        self._consecutive_connect = 0
        self._issued = 0
        self._records: list[RequestRecord] = []
        self._sessions = 0

    # -- requests ---------------------------------------------------------------------------

    def _next_request(
        self,
        warmup: bool,
        slot: int,
        *,
        prompt_index: int | None = None,
        session: Session | None = None,
    ) -> tuple[RequestRecord, bytes]:
        issued = self._issued
        self._issued += 1
        return build_request(
            self.cfg,
            self.prompts,
            issued,
            warmup,
            slot,
            prompt_index=prompt_index,
            session=session,
        )

    async def _one(self, slot: int, rec: RequestRecord, content: bytes) -> None:
        client = self.client
        assert client is not None
        live = self.live
        live.in_flight += 1
        try:
            await send_request(
                client,
                api=self.cfg.api,
                url=self.url,
                content=content,
                rec=rec,
                live=live,
                total_timeout=self.cfg.request_timeout,
            )
        finally:
            live.in_flight -= 1
            if rec.warmup:
                self._completed_warmups += 1
            else:
                self._completed_measured += 1
            if self.sink is not None:
                self.sink(rec, self.anchor)
            else:
                self._records.append(rec)
            self._account(rec)

    def _account(self, rec: RequestRecord) -> None:
        live = self.live
        if rec.ok:
            live.completed += 1
            self._consecutive_connect = 0
            if rec.first_token is not None:
                live.recent_ttft.append(rec.first_token - rec.start)
            return
        if rec.error_kind == "cancelled":
            return
        live.errors += 1
        if rec.error_kind == "connect":
            self._consecutive_connect += 1
        cfg = self.cfg
        if cfg.on_server_error != "stop" or self.failed.is_set():
            return
        done = live.completed + live.errors
        if self._consecutive_connect >= cfg.max_consecutive_connect_errors:
            self._fail(f"{self._consecutive_connect} consecutive connection errors: {rec.error}")
        elif done >= cfg.min_requests_for_ratio and live.errors / done > cfg.max_error_ratio:
            self._fail(
                f"error ratio {live.errors}/{done} above {cfg.max_error_ratio:g}; "
                f"last error {rec.error_kind}: {rec.error}"
            )

    def _fail(self, reason: str) -> None:
        self.reason = reason
        self.stopping = True
        self.failed.set()

    # -- phases -----------------------------------------------------------------------------

    async def _closed_worker(self, slot: int, limit: int | None, deadline: float | None) -> None:
        warmup = self.phase == "warmup"
        while not self.stopping:
            if limit is not None and self._issued >= limit:
                return
            if deadline is not None and time.perf_counter() >= deadline:
                return
            rec, content = self._next_request(warmup, slot)
            await self._one(slot, rec, content)
            if rec.error_kind == "connect" and self.cfg.on_server_error != "stop":
                await asyncio.sleep(0.05)  # a dead server must not become a busy loop

    async def _session_worker(self, slot: int, limit: int | None, deadline: float | None) -> None:
        """Sessions one after another on this slot: every turn of a session goes out from here
        (one connection pool, one server), carrying the history, after the think time."""
        cfg = self.cfg
        while not self.stopping:
            number = cfg.process_index + cfg.process_count * self._sessions
            self._sessions += 1
            session = Session(number, seed=cfg.seed)
            for turn in range(cfg.session_turns):
                if self.stopping or (limit is not None and self._issued >= limit):
                    return
                if deadline is not None and time.perf_counter() >= deadline:
                    return
                session.turn = turn
                if session.ended():
                    break  # a recorded conversation shorter than the level's turns
                rec, content = self._next_request(False, slot, session=session)
                await self._one(slot, rec, content)
                if not rec.ok:
                    break  # a failed turn ends its session: its history has no answer
                session.answered(rec.request_id, rec.output_tokens)
                if cfg.think_time > 0 and turn + 1 < cfg.session_turns:
                    await asyncio.sleep(cfg.think_time)

    async def _sessions_phase(self, limit: int | None, deadline: float | None) -> None:
        await _run_workers(
            self._session_worker(i, limit, deadline) for i in range(self.cfg.concurrency)
        )

    async def _closed_phase(self, workers: int, limit: int | None, deadline: float | None) -> None:
        await _run_workers(self._closed_worker(i, limit, deadline) for i in range(workers))

    async def _rate_phase(self, limit: int | None, deadline: float | None) -> None:
        cfg = self.cfg
        assert cfg.request_rate
        rate = cfg.request_rate
        rng = random.Random(f"{cfg.seed}:{cfg.level_index}:{cfg.process_index}:arrivals")
        slots = OpenLoopSlots(cfg.concurrency, send=self._one, stopping=lambda: self.stopping)
        t0 = time.perf_counter()

        def rate_now() -> float:
            if not cfg.ramp or cfg.ramp_start_rate is None:
                return rate
            # This process's share of the start rate, as split_level shares the end rate.
            start = cfg.ramp_start_rate / cfg.process_count
            if limit:
                progress = self._issued / max(1, limit - 1)
            elif cfg.duration:
                progress = (time.perf_counter() - t0) / cfg.duration
            else:
                progress = 1.0
            return ramp_rate(cfg.ramp, start, rate, progress)

        try:
            next_t = t0
            while not self.stopping:
                if limit is not None and self._issued >= limit:
                    break
                next_t += next_gap(rng, rate_now(), cfg.burstiness)
                if deadline is not None and next_t >= deadline:
                    break
                await wait_until(next_t)
                slot = await slots.take()
                if slot is None:
                    break
                # Late against the schedule: the loop overslept, or the cap held the arrival.
                self.health.arrival(time.perf_counter() - next_t)
                rec, content = self._next_request(False, slot)
                slots.send(slot, rec, content)
            await slots.drain()
        finally:
            await slots.cancel()

    async def _trace_phase(self, limit: int | None, deadline: float | None) -> None:
        """Arrivals at the trace's offsets from the phase's start; this process sends the
        trace's requests p, p+P, p+2P... (P processes started together), each recording the
        time it was due (`scheduled`) beside the time it went out (`start`)."""
        cfg = self.cfg
        trace = cfg.trace
        assert trace is not None
        slots = OpenLoopSlots(cfg.concurrency, send=self._one, stopping=lambda: self.stopping)
        try:
            t0 = time.perf_counter()
            while not self.stopping:
                if limit is not None and self._issued >= limit:
                    break
                k = cfg.process_index + cfg.process_count * self._issued
                if k >= len(trace.requests):
                    break
                due = t0 + trace.requests[k].offset
                if deadline is not None and due >= deadline:
                    break
                # Built while waiting for its time: a burst of arrivals then costs each only
                # its send (a prompt of a few thousand tokens takes a millisecond to build).
                rec, content = self._next_request(False, 0, prompt_index=k)
                rec.scheduled = due
                await wait_until(due)
                slot = await slots.take()
                if slot is None:
                    break
                rec.slot = cfg.slot_offset + slot
                slots.send(slot, rec, content)
            await slots.drain()
        finally:
            await slots.cancel()

    async def _run_phase(self, phase: asyncio.Task[None]) -> str:
        """Wait for `phase`, a cancel or a failure; cut what is in flight when told to stop."""
        cancel_wait = asyncio.create_task(self.cancel.wait())
        fail_wait = asyncio.create_task(self.failed.wait())
        try:
            await asyncio.wait({phase, cancel_wait, fail_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancel_wait.cancel()
            fail_wait.cancel()
        status = "completed"
        if self.cancel.is_set() and not phase.done():
            status = "cancelled"
            self.stopping = True
            self.reason = self.reason or "cancelled"
            if self.cfg.drain_seconds > 0:
                await asyncio.wait({phase}, timeout=self.cfg.drain_seconds)
        if self.failed.is_set():
            status = "failed"
        if not phase.done():
            phase.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await phase
        if self.failed.is_set():
            status = "failed"
        return status

    async def _sampler(self) -> None:
        interval = self.cfg.sample_interval
        live = self.live
        last_tokens, last_t = live.tokens, time.perf_counter()
        while True:
            await asyncio.sleep(interval)
            now = time.perf_counter()
            tokens = live.tokens
            lag_ms, cpu = self.health.take()
            ttfts = sorted(live.recent_ttft)
            sample: RunnerSample = {
                "t": time.time(),
                "phase": self.phase,
                "tok_s": (tokens - last_tokens) / (now - last_t),
                "in_flight": live.in_flight,
                "completed": live.completed,
                "errors": live.errors,
                "ttft_p50": quantile(ttfts, 0.5) if ttfts else None,
                "loop_lag_ms": lag_ms,
                "client_cpu": cpu,
                "client_limited": client_limited(lag_ms, cpu),
                "recent_ttft": ttfts,
            }
            last_tokens, last_t = tokens, now
            if self.on_sample is not None:
                self.on_sample(sample)

    async def run(
        self,
        *,
        start_wall: float | None = None,
        before_measure: Callable[[], Awaitable[None]] | None = None,
    ) -> LevelResult:
        cfg = self.cfg
        own_client = self.client is None
        if self.client is None:
            # One pool for the whole level: taking and returning a connection is O(1) here
            # (httpx's pool scanned every connection per request, so it was split in shards).
            self.client = make_client(cfg.concurrency, request_timeout=cfg.request_timeout)
        self.health.start()
        sampler = asyncio.create_task(self._sampler())
        result = LevelResult(
            level_index=cfg.level_index,
            concurrency=cfg.concurrency,
            mode=cfg.mode,
            anchor=self.anchor,
        )
        status = "completed"
        try:
            warmups = share(cfg.warmup_requests, cfg.process_index, cfg.process_count) or 0
            if warmups > 0:
                workers = min(cfg.concurrency, warmups)
                phase = asyncio.create_task(self._closed_phase(workers, warmups, None))
                status = await self._run_phase(phase)
                result.warmup_records = self._records
                self._records = []
            if status == "completed":
                if before_measure is not None:
                    await before_measure()
                if start_wall is not None:
                    await asyncio.sleep(max(0.0, start_wall - time.time()))
                status = await self._measured()
        finally:
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            await self.health.stop()
            if own_client and self.client is not None:
                await self.client.aclose()
                self.client = None
        result.records = self._records
        result.measured_count = self._completed_measured
        result.warmup_count = self._completed_warmups
        result.status = status
        result.reason = self.reason if status != "completed" else None
        result.client = self.health.summary()
        return result

    async def _measured(self) -> str:
        cfg = self.cfg
        self.phase = "measure"
        self._issued = 0
        if self.cancel.is_set():
            self.reason = "cancelled"
            return "cancelled"
        deadline = time.perf_counter() + cfg.duration if cfg.duration else None
        limit = share(cfg.num_requests, cfg.process_index, cfg.process_count)
        if cfg.trace is not None:
            coro = self._trace_phase(limit, deadline)
        elif cfg.session_turns > 1:
            coro = self._sessions_phase(limit, deadline)
        elif cfg.request_rate:
            coro = self._rate_phase(limit, deadline)
        else:
            coro = self._closed_phase(cfg.concurrency, limit, deadline)
        return await self._run_phase(asyncio.create_task(coro))


async def run_level(
    cfg: LevelConfig,
    prompts: PromptSource,
    *,
    client: StreamClient | None = None,
    cancel: asyncio.Event | None = None,
    on_sample: SampleCallback | None = None,
    start_wall: float | None = None,
    before_measure: Callable[[], Awaitable[None]] | None = None,
    sink: RecordSink | None = None,
) -> LevelResult:
    """Run one level in this process and return its records (summarize them with metrics),
    or hand each record to `sink` as it completes and keep none.

    `before_measure` is awaited after the warm-up, right before the first measured request
    (the CLI opens the level's server-side interval there)."""
    runner = LevelRunner(cfg, prompts, client=client, cancel=cancel, on_sample=on_sample, sink=sink)
    return await runner.run(start_wall=start_wall, before_measure=before_measure)
