from __future__ import annotations

# Live counters and the client's own health (event-loop lag, CPU).
#
# A load generator that is itself saturated reports its own limits as the server's. The ticker
# measures how late the event loop wakes it; CPU comes from os.times(). Both go into every live
# sample and into the level summary, with a warning flag when the client is the likely bottleneck.
import asyncio
import contextlib
import os
import time
from collections import deque
from typing import Any, TypedDict

from benchlib.loadgen.metrics import distribution
from benchlib.stats.intervals import quantile

LAG_WARN_MS = 20.0  # p99 event-loop lag above this: the client delays what it timestamps
# One stall this long delays every request in flight at that moment (a 635 ms stall raised a
# level's mean TTFT by 60 %) while leaving the p99 of hundreds of 20 ms ticks untouched.
STALL_WARN_MS = 100.0
CPU_WARN_PCT = 90.0  # one core busy: the client cannot keep up
# At a fixed request rate every arrival has a scheduled send time. One sent this much later
# was late (a sleep overshoots by about a millisecond on an idle loop); when more than
# STARVED_SHARE of a level's arrivals are late the load source could not keep its schedule
# (a saturated loop, or the concurrency cap reached), so the level did not get the asked load.
ARRIVAL_LATE_MS = 10.0
STARVED_SHARE = 0.05


class LiveStats:
    """Counters bumped by the request path (one integer add per chunk) and read by the sampler."""

    __slots__ = ("completed", "errors", "in_flight", "recent_ttft", "tokens")

    def __init__(self, ttft_window: int = 100) -> None:
        self.tokens = 0
        self.in_flight = 0
        self.completed = 0
        self.errors = 0
        self.recent_ttft: deque[float] = deque(maxlen=ttft_window)


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


class HealthMonitor:
    """Ticks every `interval` seconds; `take()` reads and resets the last period's figures."""

    def __init__(self, interval: float = 0.02) -> None:
        self.interval = interval
        self._period_lags: list[float] = []
        self._all_lags: list[float] = []
        self._cpu_samples: list[float] = []
        self._last_cpu = _cpu_seconds()
        self._last_wall = time.perf_counter()
        self._task: asyncio.Task[None] | None = None
        self._late: list[float] = []  # seconds each arrival was sent after its schedule

    def arrival(self, late_s: float) -> None:
        """One arrival of a fixed-rate level sent ``late_s`` after its scheduled time."""
        self._late.append(late_s if late_s > 0 else 0.0)

    def start(self) -> None:
        self._last_cpu = _cpu_seconds()
        self._last_wall = time.perf_counter()
        self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _tick(self) -> None:
        perf = time.perf_counter
        interval = self.interval
        while True:
            t0 = perf()
            await asyncio.sleep(interval)
            lag = perf() - t0 - interval
            self._period_lags.append(lag if lag > 0 else 0.0)

    def take(self) -> tuple[float, float]:
        """(max loop lag in ms, CPU % of one core) since the previous call."""
        lags = self._period_lags
        self._period_lags = []
        self._all_lags.extend(lags)
        now_cpu, now_wall = _cpu_seconds(), time.perf_counter()
        dt = now_wall - self._last_wall
        cpu = 100.0 * (now_cpu - self._last_cpu) / dt if dt > 0 else 0.0
        self._last_cpu, self._last_wall = now_cpu, now_wall
        self._cpu_samples.append(cpu)
        return (max(lags) * 1e3 if lags else 0.0), cpu

    def summary(self) -> dict[str, Any]:
        """Loop lag over the whole level, CPU over its samples, and the client-limited warning."""
        self.take()
        lags = sorted(self._all_lags)
        lag = distribution(lags, scale=1e3)
        cpu = self._cpu_samples[1:] or self._cpu_samples  # the first period includes start-up
        cpu_mean = sum(cpu) / len(cpu) if cpu else 0.0
        lag_p99 = quantile(lags, 0.99) * 1e3 if lags else 0.0
        reasons = []
        if lag_p99 > LAG_WARN_MS:
            reasons.append(f"event-loop lag p99 {lag_p99:.1f} ms > {LAG_WARN_MS:g} ms")
        lag_max = lags[-1] * 1e3 if lags else 0.0
        if lag_max > STALL_WARN_MS:
            reasons.append(f"event-loop stall {lag_max:.0f} ms (max) > {STALL_WARN_MS:g} ms")
        if cpu_mean > CPU_WARN_PCT:
            reasons.append(f"client CPU {cpu_mean:.0f}% > {CPU_WARN_PCT:g}%")
        return {
            "loop_lag_ms": {k: lag[k] for k in ("count", "p50", "p99", "max")},
            "cpu_pct": {"mean": cpu_mean, "max": max(cpu) if cpu else 0.0},
            "client_limited": bool(reasons),
            "warnings": reasons,
            **arrival_health(self._late),
        }


class ArrivalLateness(TypedDict):
    """How late a level's scheduled arrivals were sent (``arrival_health``)."""

    count: int
    late: int  # over ARRIVAL_LATE_MS after their schedule
    late_p99_ms: float


class ArrivalHealth(TypedDict):
    """The load source's part of the client's health (``arrival_health``)."""

    arrivals: ArrivalLateness
    load_source_starved: bool
    starved_reason: str  # "" when not starved


def arrival_health(late: list[float]) -> ArrivalHealth:
    """How late a fixed-rate level's arrivals were sent, and whether the load source was
    starved (``STARVED_SHARE`` of them later than ``ARRIVAL_LATE_MS``); closed loops have no
    schedule to be late against."""
    ordered = sorted(late)
    count = len(ordered)
    late_count = sum(1 for x in ordered if x * 1e3 > ARRIVAL_LATE_MS)
    share = late_count / count if count else 0.0
    p99 = quantile(ordered, 0.99) * 1e3 if ordered else 0.0
    reason = ""
    if count and share > STARVED_SHARE:
        reason = (
            f"{late_count} of {count} arrivals sent over {ARRIVAL_LATE_MS:g} ms after their "
            f"schedule (p99 {p99:.0f} ms)"
        )
    return {
        "arrivals": {"count": count, "late": late_count, "late_p99_ms": p99},
        "load_source_starved": bool(reason),
        "starved_reason": reason,
    }


def client_limited(loop_lag_ms: float, cpu_pct: float) -> bool:
    return loop_lag_ms > LAG_WARN_MS or cpu_pct > CPU_WARN_PCT
