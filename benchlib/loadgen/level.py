from __future__ import annotations

# One level of load: a closed loop of C workers (or Poisson arrivals), with a live sampler.
#
# Closed loop: C workers each send their next request as soon as the previous one ends, so C are in
# flight at all times. The level ends after a request count or a duration, on cancel (drained for
# `drain_seconds`, then cut), or when the server-error policy gives up on the server.
import asyncio
import contextlib
import json
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from benchlib.loadgen.apis import PATHS, Api, build_body
from benchlib.loadgen.client import StreamClient, make_client, send_request
from benchlib.loadgen.health import HealthMonitor, LiveStats, client_limited
from benchlib.loadgen.prompts import PromptSource
from benchlib.loadgen.ramp import ramp_rate
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.sessions import Session
from benchlib.loadgen.traces import Trace
from benchlib.stats.intervals import quantile

if TYPE_CHECKING:
    from benchlib.loadgen.settings import LoadSettings

DEFAULT_MAX_TOKENS = 128
_LEVEL_STRIDE = 10_000_019  # prompt indices of different levels never overlap

SampleCallback = Callable[[dict[str, Any]], None]
# Takes each request's record as it completes (warm-up ones included) and the level's anchor:
# with one, the runner keeps no records, so its memory does not grow with the level.
RecordSink = Callable[[RequestRecord, ClockAnchor], None]


@dataclass(frozen=True, slots=True)
class LevelConfig:
    """Everything one level (or one process's share of it) needs."""

    api: Api
    base_url: str
    model: str
    concurrency: int
    level_index: int = 0
    num_requests: int | None = None
    duration: float | None = None
    warmup_requests: int = 0
    request_rate: float | None = None
    # Gamma-distributed gaps between arrivals with this shape (1: Poisson; below 1 burstier, above
    # more regular), scale 1 / (rate * burstiness) so the mean rate stays `request_rate`.
    burstiness: float = 1.0
    max_tokens: int | None = None  # None: the dataset's length, else DEFAULT_MAX_TOKENS
    ignore_eos: bool = False
    temperature: float | None = None
    extra_body: dict[str, Any] | None = None
    request_timeout: float = 600.0
    seed: int = 0
    drain_seconds: float = 0.0
    on_server_error: str = "stop"  # or "continue"
    max_consecutive_connect_errors: int = 10
    max_error_ratio: float = 0.5
    min_requests_for_ratio: int = 20
    sample_interval: float = 1.0
    run_id: str = "run"
    # a share of a level split across processes: this process issues indices p, p+P, p+2P...
    process_index: int = 0
    process_count: int = 1
    slot_offset: int = 0
    # A replayed trace (already windowed and scaled): request k arrives at the measured phase's
    # start + trace.requests[k].offset and is built from the trace's prompt k (the prompt source
    # is then a TracePrompts over the same trace); the concurrency caps in-flight as with a rate.
    trace: Trace | None = None
    # A ramp within the level (benchlib.loadgen.ramp): the rate rises from ramp_start_rate to
    # request_rate over the level's requests (or its duration).
    ramp: str = ""
    ramp_start_rate: float | None = None
    # Multi-turn sessions (benchlib.loadgen.sessions): each closed-loop worker runs sessions of
    # this many turns, one after another, history carried, `think_time` between turns.
    session_turns: int = 0
    turn_tokens: int = 32
    think_time: float = 0.0

    @property
    def mode(self) -> str:
        # A trace is open-loop arrivals too: its steady window is the arrival window.
        return "rate" if self.request_rate or self.trace is not None else "closed"

    @classmethod
    def from_settings(
        cls,
        settings: LoadSettings,
        *,
        base_url: str,
        concurrency: int,
        request_rate: float | None,
        **run: Any,
    ) -> LevelConfig:
        """One level of a run with these load settings (``run``: the rest, such as the
        level's index, the seed and the server-error policy). A max_tokens not given leaves
        the output length to the dataset."""
        return cls(
            api=Api(settings.api),
            base_url=base_url,
            model=settings.model,
            concurrency=concurrency,
            num_requests=settings.requests_per_level,
            duration=settings.duration,
            warmup_requests=settings.warmup_requests,
            request_rate=request_rate,
            burstiness=settings.burstiness,
            max_tokens=settings.max_tokens if "max_tokens" in settings.model_fields_set else None,
            ignore_eos=settings.ignore_eos,
            temperature=settings.temperature,
            request_timeout=settings.request_timeout,
            ramp=settings.ramp,
            ramp_start_rate=settings.ramp_start_rate,
            session_turns=settings.session_turns,
            turn_tokens=settings.turn_tokens,
            think_time=settings.think_time,
            **run,
        )


@dataclass(slots=True)
class LevelResult:
    level_index: int
    concurrency: int
    mode: str
    anchor: ClockAnchor
    records: list[RequestRecord] = field(default_factory=list)
    warmup_records: list[RequestRecord] = field(default_factory=list)
    status: str = "completed"  # "completed" | "cancelled" | "failed"
    reason: str | None = None
    client: dict[str, Any] = field(default_factory=dict)
    # With a record sink the records went there as they completed and the lists above stay
    # empty; these count them either way.
    measured_count: int = 0
    warmup_count: int = 0

    @property
    def partial(self) -> bool:
        return self.status != "completed"


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
        cfg = self.cfg
        j = self._issued
        self._issued += 1
        k = cfg.process_index + cfg.process_count * j
        base = cfg.level_index * _LEVEL_STRIDE
        if prompt_index is None:
            prompt_index = base - 1 - k if warmup else base + k
        prompt = self.prompts.get(prompt_index)
        if session is not None and session.turn == 0:
            session.begins(prompt)
        elif session is not None:
            prompt = session.follow_up(cfg.turn_tokens)
        max_tokens = cfg.max_tokens or prompt.max_tokens or DEFAULT_MAX_TOKENS
        body = build_body(
            cfg.api,
            model=cfg.model,
            prompt=prompt.text,
            max_tokens=max_tokens,
            ignore_eos=cfg.ignore_eos,
            temperature=cfg.temperature,
            extra=cfg.extra_body,
        )
        if session is not None:
            body["messages"] = session.ask(prompt.text)
        rid = f"{cfg.run_id}-{cfg.level_index}-{'w' if warmup else ''}{k}"
        rec = RequestRecord(
            request_id=rid,
            slot=cfg.slot_offset + slot,
            process=cfg.process_index,
            warmup=warmup,
            category=prompt.category,
        )
        if session is not None:
            rec.session, rec.turn = session.number, session.turn
        return rec, json.dumps(body).encode()

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
        workers = self.cfg.concurrency
        tasks = [
            asyncio.create_task(self._session_worker(i, limit, deadline)) for i in range(workers)
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _closed_phase(self, workers: int, limit: int | None, deadline: float | None) -> None:
        tasks = [
            asyncio.create_task(self._closed_worker(i, limit, deadline)) for i in range(workers)
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _rate_phase(self, limit: int | None, deadline: float | None) -> None:
        cfg = self.cfg
        assert cfg.request_rate
        rate = cfg.request_rate
        rng = random.Random(f"{cfg.seed}:{cfg.level_index}:{cfg.process_index}:arrivals")
        slots = _OpenLoopSlots(self, cfg.concurrency)
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
        slots = _OpenLoopSlots(self, cfg.concurrency)
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
            sample = {
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


class _OpenLoopSlots:
    """What an open-loop phase (fixed rate or trace) keeps: at most ``concurrency`` requests in
    flight, each on a free slot (a slot is a client's connection), and their tasks until done."""

    def __init__(self, runner: LevelRunner, concurrency: int) -> None:
        self._runner = runner
        self._sem = asyncio.Semaphore(concurrency)
        self._free = list(range(concurrency - 1, -1, -1))
        self._tasks: set[asyncio.Task[None]] = set()

    async def take(self) -> int | None:
        """A free slot, waiting for one when the cap is reached; None once the level stops."""
        await self._sem.acquire()
        if self._runner.stopping:
            self._sem.release()
            return None
        return self._free.pop()

    def send(self, slot: int, rec: RequestRecord, content: bytes) -> None:
        task = asyncio.create_task(self._one(slot, rec, content))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _one(self, slot: int, rec: RequestRecord, content: bytes) -> None:
        try:
            await self._runner._one(slot, rec, content)
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


def level_plan(
    concurrency: Sequence[int], rates: Sequence[float] | None
) -> list[tuple[int, float | None]]:
    """(concurrency, rate) per level, from the CLI's --concurrency and --request-rate (and a
    sweep's levels and request rates). One rate applies to every concurrency level; several
    rates with one concurrency make a rate sweep capped at that concurrency; else the lists
    pair up."""
    if not rates:
        return [(c, None) for c in concurrency]
    if len(rates) == 1:
        return [(c, rates[0]) for c in concurrency]
    if len(concurrency) == 1:
        return [(concurrency[0], r) for r in rates]
    if len(rates) != len(concurrency):
        raise ValueError("give one request rate, one concurrency, or as many rates as levels")
    return list(zip(concurrency, rates, strict=True))


def next_gap(rng: random.Random, rate: float, burstiness: float = 1.0) -> float:
    """Seconds to the next arrival: exponential (Poisson arrivals) or gamma with shape
    `burstiness` and the same mean 1 / rate, as vLLM's benchmark client draws them."""
    if burstiness == 1.0:
        return rng.expovariate(rate)
    return rng.gammavariate(burstiness, 1.0 / (rate * burstiness))


def share(total: int | None, index: int, count: int) -> int | None:
    """This process's part of `total` (the first `total % count` processes take one more)."""
    if total is None:
        return None
    return total // count + (1 if index < total % count else 0)


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
