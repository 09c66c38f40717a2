"""The clock stage's shift reaches the process that runs the tests: under pytest-xdist that is a
worker the controller started, which must inherit the shifted clocks (`make pytest-clock`,
tests/fixtures/clockshift). In a plain run the offset is zero and the same check holds."""

from __future__ import annotations

import os
import time
from pathlib import Path


def test_the_monotonic_clock_reads_the_uptime_plus_the_stages_offset():
    offset_s = int(os.environ.get("SPECDASH_TEST_CLOCK_OFFSET_NS", "0")) / 1e9
    # /proc/uptime is the kernel's own count since boot, which the shift does not touch; Linux's
    # monotonic clock is that count less any time suspended (none on a test machine).
    uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    assert abs(time.monotonic() - (uptime_s + offset_s)) < 5.0
    assert abs(time.perf_counter() - time.monotonic()) < 5.0
