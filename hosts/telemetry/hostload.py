"""Host load from `/proc/stat`, `/proc/meminfo` and `/proc/loadavg` text, plus a local sampler.

The parsers take text, so a remote host's files can be read over any transport
(`cat /proc/stat /proc/meminfo` in one call). `LocalHostSampler` uses psutil for the machine
the dashboard itself runs on.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import psutil

# Columns of a `cpu` line, in kernel order; older kernels print fewer of them.
_CPU_COLUMNS = (
    "user",
    "nice",
    "system",
    "idle",
    "iowait",
    "irq",
    "softirq",
    "steal",
    "guest",
    "guest_nice",
)


@dataclass(frozen=True)
class CpuTimes:
    # Clock ticks (USER_HZ) since boot.
    user: int
    nice: int
    system: int
    idle: int
    iowait: int = 0
    irq: int = 0
    softirq: int = 0
    steal: int = 0
    guest: int = 0
    guest_nice: int = 0

    @property
    def total(self) -> int:
        # guest and guest_nice are already included in user and nice.
        return (
            self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
        )

    @property
    def idle_all(self) -> int:
        return self.idle + self.iowait


@dataclass(frozen=True)
class ProcStat:
    # The aggregate line: the sum over all CPUs.
    total: CpuTimes
    per_cpu: Mapping[str, CpuTimes]
    procs_running: int | None
    procs_blocked: int | None
    boot_time: int | None


@dataclass(frozen=True)
class CpuUtilisation:
    busy_pct: float
    iowait_pct: float
    steal_pct: float
    per_cpu_busy_pct: Mapping[str, float]


@dataclass(frozen=True)
class MemInfo:
    total_bytes: int
    # MemAvailable: what can be allocated without swapping (estimated on kernels before 3.14).
    available_bytes: int
    free_bytes: int
    swap_total_bytes: int
    swap_free_bytes: int

    @property
    def used_bytes(self) -> int:
        return self.total_bytes - self.available_bytes

    @property
    def used_pct(self) -> float:
        return 100.0 * self.used_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass(frozen=True)
class LoadAvg:
    load1: float
    load5: float
    load15: float
    # From /proc/loadavg only (psutil does not give them).
    runnable: int | None = None
    scheduling_entities: int | None = None
    last_pid: int | None = None


@dataclass(frozen=True)
class HostLoadSample:
    at: float
    cpu_busy_pct: float
    per_cpu_busy_pct: tuple[float, ...]
    cpu_count: int
    memory: MemInfo
    load: LoadAvg


def parse_proc_stat(text: str) -> ProcStat:
    total: CpuTimes | None = None
    per_cpu: dict[str, CpuTimes] = {}
    scalars: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        key = parts[0]
        if key.startswith("cpu"):
            times = _cpu_times(parts[1:])
            if key == "cpu":
                total = times
            else:
                per_cpu[key] = times
        elif key in {"procs_running", "procs_blocked", "btime"} and len(parts) > 1:
            scalars[key] = int(parts[1])
    if total is None:
        raise ValueError("no aggregate cpu line in /proc/stat text")
    return ProcStat(
        total=total,
        per_cpu=per_cpu,
        procs_running=scalars.get("procs_running"),
        procs_blocked=scalars.get("procs_blocked"),
        boot_time=scalars.get("btime"),
    )


def _cpu_times(values: list[str]) -> CpuTimes:
    if len(values) < 4:
        raise ValueError(f"a cpu line needs at least 4 columns, got {len(values)}")
    numbers = [int(value) for value in values[: len(_CPU_COLUMNS)]]
    return CpuTimes(**dict(zip(_CPU_COLUMNS, numbers, strict=False)))


def cpu_utilisation(before: ProcStat, after: ProcStat) -> CpuUtilisation | None:
    """Utilisation between two reads; None when the counters went back (a reboot)."""
    busy = _busy_pct(before.total, after.total)
    if busy is None:
        return None
    elapsed = after.total.total - before.total.total
    per_cpu = {
        name: pct
        for name, times in after.per_cpu.items()
        if name in before.per_cpu and (pct := _busy_pct(before.per_cpu[name], times)) is not None
    }
    return CpuUtilisation(
        busy_pct=busy,
        iowait_pct=_clamp_pct(100.0 * (after.total.iowait - before.total.iowait) / elapsed),
        steal_pct=_clamp_pct(100.0 * (after.total.steal - before.total.steal) / elapsed),
        per_cpu_busy_pct=per_cpu,
    )


def _busy_pct(before: CpuTimes, after: CpuTimes) -> float | None:
    elapsed = after.total - before.total
    if elapsed <= 0:
        return None
    idle = after.idle_all - before.idle_all
    # iowait may even go backwards on one CPU (the kernel documents it as unreliable): clamp.
    return _clamp_pct(100.0 * (elapsed - idle) / elapsed)


def _clamp_pct(value: float) -> float:
    return max(0.0, min(100.0, value))


def parse_meminfo(text: str) -> MemInfo:
    kib: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if sep and fields and fields[0].isdigit():
            kib[name.strip()] = int(fields[0])
    if "MemTotal" not in kib:
        raise ValueError("no MemTotal in /proc/meminfo text")
    available = kib.get("MemAvailable")
    if available is None:
        available = kib.get("MemFree", 0) + kib.get("Buffers", 0) + kib.get("Cached", 0)
    return MemInfo(
        total_bytes=kib["MemTotal"] * 1024,
        available_bytes=available * 1024,
        free_bytes=kib.get("MemFree", 0) * 1024,
        swap_total_bytes=kib.get("SwapTotal", 0) * 1024,
        swap_free_bytes=kib.get("SwapFree", 0) * 1024,
    )


def parse_loadavg(text: str) -> LoadAvg:
    parts = text.split()
    if len(parts) < 5 or "/" not in parts[3]:
        raise ValueError(f"unexpected /proc/loadavg text: {text!r}")
    runnable, _, entities = parts[3].partition("/")
    return LoadAvg(
        load1=float(parts[0]),
        load5=float(parts[1]),
        load15=float(parts[2]),
        runnable=int(runnable),
        scheduling_entities=int(entities),
        last_pid=int(parts[4]),
    )


class LocalHostSampler:
    """Samples the dashboard machine; CPU figures cover the time since the previous sample.

    The first sample's CPU figures cover the time since construction. Non-blocking: safe to
    call from a periodic task, though it does read /proc synchronously.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        # psutil measures CPU use since its previous call: prime it so the first sample counts.
        psutil.cpu_percent(percpu=True)

    def sample(self) -> HostLoadSample:
        per_cpu = tuple(float(pct) for pct in psutil.cpu_percent(percpu=True))
        memory = psutil.virtual_memory()
        swap = psutil.swap_memory()
        load1, load5, load15 = psutil.getloadavg()
        return HostLoadSample(
            at=self._clock(),
            cpu_busy_pct=sum(per_cpu) / len(per_cpu) if per_cpu else 0.0,
            per_cpu_busy_pct=per_cpu,
            cpu_count=len(per_cpu),
            memory=MemInfo(
                total_bytes=int(memory.total),
                available_bytes=int(memory.available),
                free_bytes=int(memory.free),
                swap_total_bytes=int(swap.total),
                swap_free_bytes=int(swap.free),
            ),
            load=LoadAvg(load1=load1, load5=load5, load15=load15),
        )
