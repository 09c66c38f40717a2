"""client_limited catches one long stall of the load generator's own event loop; arrivals
late against their schedule mark the load source starved."""

from __future__ import annotations

import asyncio
import time

import pytest

from benchlib.loadgen.health import HealthMonitor, arrival_health
from benchlib.loadgen.merge import merge_client_health


async def test_one_long_event_loop_stall_marks_the_level_client_limited() -> None:
    monitor = HealthMonitor()
    monitor.start()
    try:
        await asyncio.sleep(2.0)
        time.sleep(0.4)  # noqa: ASYNC251  (the stall under test: blocks the event loop)
        await asyncio.sleep(2.5)
    finally:
        await monitor.stop()
    summary = monitor.summary()
    lag = summary["loop_lag_ms"]
    # Hundreds of on-time ticks keep the p99 low: the p99 rule alone would pass this level.
    assert lag["count"] > 100
    assert lag["max"] >= 400 - monitor.interval * 1e3 - 1  # a tick already under way
    assert summary["client_limited"] is True
    assert any("stall" in warning for warning in summary["warnings"]), summary["warnings"]


def test_arrivals_late_against_their_schedule_mark_the_load_source_starved() -> None:
    monitor = HealthMonitor()
    for i in range(100):
        monitor.arrival(0.002 if i % 10 else 0.030)  # every tenth 30 ms late
    summary = monitor.summary()
    assert summary["arrivals"] == {"count": 100, "late": 10, "late_p99_ms": pytest.approx(30.0)}
    assert summary["load_source_starved"] is True
    assert summary["starved_reason"] == (
        "10 of 100 arrivals sent over 10 ms after their schedule (p99 30 ms)"
    )
    # It is not the client-limited flag: the loop itself may be idle (the cap held them).
    assert summary["client_limited"] is False


def test_a_few_late_arrivals_or_none_at_all_are_not_starvation() -> None:
    few = arrival_health([0.001] * 96 + [0.050] * 4)  # 4%: under the 5% share
    assert (few["arrivals"]["late"], few["load_source_starved"]) == (4, False)
    closed = arrival_health([])  # a closed loop has no schedule
    assert closed["arrivals"]["count"] == 0 and not closed["load_source_starved"]


def test_merged_processes_are_starved_when_one_is() -> None:
    ok = {**HealthMonitor().summary(), **arrival_health([0.001] * 50)}
    late = {**HealthMonitor().summary(), **arrival_health([0.001] * 40 + [0.020] * 10)}
    merged = merge_client_health([ok, late])
    assert merged["arrivals"]["count"] == 100 and merged["arrivals"]["late"] == 10
    assert merged["load_source_starved"] is True
    assert merged["starved_reason"].startswith("process 1: 10 of 50 arrivals")
