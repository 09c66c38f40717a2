"""client_limited catches one long stall of the load generator's own event loop."""

from __future__ import annotations

import asyncio
import time

from benchlib.loadgen.health import HealthMonitor


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
