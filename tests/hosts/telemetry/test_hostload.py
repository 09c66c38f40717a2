from __future__ import annotations

import pytest

from hosts.telemetry.hostload import (
    LocalHostSampler,
    cpu_utilisation,
    parse_loadavg,
    parse_meminfo,
    parse_proc_stat,
)

STAT_1 = """\
cpu  10000 100 3000 80000 500 0 200 0 0 0
cpu0 5000 50 1500 40000 250 0 100 0 0 0
cpu1 5000 50 1500 40000 250 0 100 0 0 0
intr 123456 0 0
ctxt 9876543
btime 1733100000
processes 42000
procs_running 3
procs_blocked 1
softirq 1 2 3
"""

# 1000 ticks later: cpu0 fully busy, cpu1 idle except 100 ticks of iowait.
STAT_2 = """\
cpu  11000 100 3000 80900 600 0 200 0 0 0
cpu0 6000 50 1500 40000 250 0 100 0 0 0
cpu1 5000 50 1500 40900 350 0 100 0 0 0
procs_running 1
procs_blocked 0
"""

MEMINFO = """\
MemTotal:       263842816 kB
MemFree:        12000000 kB
MemAvailable:   200000000 kB
Buffers:          500000 kB
Cached:         150000000 kB
SwapCached:            0 kB
SwapTotal:       8388604 kB
SwapFree:        8388604 kB
HugePages_Total:       0
"""


def test_proc_stat_cpu_lines_and_scalars():
    stat = parse_proc_stat(STAT_1)

    assert stat.total.user == 10000
    assert stat.total.total == 10000 + 100 + 3000 + 80000 + 500 + 200
    assert set(stat.per_cpu) == {"cpu0", "cpu1"}
    assert (stat.procs_running, stat.procs_blocked, stat.boot_time) == (3, 1, 1733100000)


def test_cpu_utilisation_between_two_reads():
    util = cpu_utilisation(parse_proc_stat(STAT_1), parse_proc_stat(STAT_2))

    assert util is not None
    assert util.busy_pct == pytest.approx(50.0)
    assert util.iowait_pct == pytest.approx(5.0)
    assert util.steal_pct == 0.0
    assert util.per_cpu_busy_pct["cpu0"] == pytest.approx(100.0)
    assert util.per_cpu_busy_pct["cpu1"] == pytest.approx(0.0)


def test_cpu_utilisation_after_a_reboot_is_unknown():
    assert cpu_utilisation(parse_proc_stat(STAT_2), parse_proc_stat(STAT_1)) is None


def test_old_kernel_with_four_cpu_columns():
    stat = parse_proc_stat("cpu 1 2 3 4\n")
    assert (stat.total.iowait, stat.total.steal, stat.total.total) == (0, 0, 10)


def test_proc_stat_without_cpu_line_is_an_error():
    with pytest.raises(ValueError):
        parse_proc_stat("ctxt 1\n")


def test_meminfo_in_bytes():
    mem = parse_meminfo(MEMINFO)

    assert mem.total_bytes == 263842816 * 1024
    assert mem.available_bytes == 200000000 * 1024
    assert mem.used_bytes == (263842816 - 200000000) * 1024
    assert mem.used_pct == pytest.approx(100 * (263842816 - 200000000) / 263842816)
    assert mem.swap_free_bytes == mem.swap_total_bytes


def test_meminfo_without_memavailable_estimates_it():
    mem = parse_meminfo("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 250 kB\n")
    assert mem.available_bytes == 400 * 1024


def test_loadavg():
    load = parse_loadavg("12.50 10.25 8.00 17/2345 987654\n")

    assert (load.load1, load.load5, load.load15) == (12.5, 10.25, 8.0)
    assert (load.runnable, load.scheduling_entities, load.last_pid) == (17, 2345, 987654)
    with pytest.raises(ValueError):
        parse_loadavg("garbage")


def test_local_sampler_reads_this_machine():
    sampler = LocalHostSampler(clock=lambda: 42.0)

    sample = sampler.sample()

    assert sample.at == 42.0
    assert sample.cpu_count == len(sample.per_cpu_busy_pct) >= 1
    assert 0.0 <= sample.cpu_busy_pct <= 100.0
    assert sample.memory.total_bytes > 0
    assert sample.load.load1 >= 0.0
