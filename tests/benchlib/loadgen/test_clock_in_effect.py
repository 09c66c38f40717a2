"""The clock stage's shift reaches the process that runs the tests: under pytest-xdist that is a
worker the controller started, which must inherit the shifted clocks (`make pytest-clock`,
tests/fixtures/clockshift). In a plain run the offset is zero and the same check holds."""

from __future__ import annotations

import os
import time


def test_the_monotonic_clock_reads_the_kernels_plus_the_stages_offset():
    offset_s = int(os.environ.get("SPECDASH_TEST_CLOCK_OFFSET_NS", "0")) / 1e9
    # clock_gettime is the kernel's own monotonic clock, which the shift does not patch (it
    # patches time.monotonic and time.perf_counter only); unlike /proc/uptime it is not
    # virtualised per container.
    kernel_s = time.clock_gettime(time.CLOCK_MONOTONIC)
    assert abs(time.monotonic() - (kernel_s + offset_s)) < 5.0
    assert abs(time.perf_counter() - time.monotonic()) < 5.0
