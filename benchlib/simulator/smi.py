from __future__ import annotations

# The nvidia-smi stand-in (standard library only), answering from the simulator's GPU ledger.
import argparse
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TextIO

from .config import default_state_dir
from .gpu import Entry, Gpu, live_entries, load_inventory, process_name

DRIVER_VERSION = "580.95.05"
CUDA_VERSION = "13.0"
UTIL_FRESH_S = 5.0

GpuField = Callable[[Gpu, "Snapshot"], str]


class Snapshot:
    def __init__(self, state_dir: str) -> None:
        self.gpus = load_inventory(state_dir)
        self.entries = live_entries(state_dir)
        now = time.time()
        self.used: dict[int, int] = {}
        self.util: dict[int, int] = {}
        for entry in self.entries:
            for index, mib in entry.memory_mib.items():
                self.used[index] = self.used.get(index, 0) + mib
            if now - entry.updated <= UTIL_FRESH_S:
                for index, pct in entry.utilization.items():
                    self.util[index] = max(self.util.get(index, 0), min(100, pct))


def _util(g: Gpu, s: Snapshot) -> int:
    return s.util.get(g.index, 0)


GPU_FIELDS: dict[str, tuple[str, GpuField]] = {
    "index": ("", lambda g, s: str(g.index)),
    "uuid": ("", lambda g, s: g.uuid),
    "name": ("", lambda g, s: g.name),
    "count": ("", lambda g, s: str(len(s.gpus))),
    "driver_version": ("", lambda g, s: DRIVER_VERSION),
    "pci.bus_id": ("", lambda g, s: f"00000000:{0x18 + 0x10 * g.index:02X}:00.0"),
    "memory.total": ("MiB", lambda g, s: str(g.total_mib)),
    "memory.used": ("MiB", lambda g, s: str(min(g.total_mib, s.used.get(g.index, 0)))),
    "memory.free": ("MiB", lambda g, s: str(max(0, g.total_mib - s.used.get(g.index, 0)))),
    "utilization.gpu": ("%", lambda g, s: str(_util(g, s))),
    "utilization.memory": ("%", lambda g, s: str(_util(g, s) // 2)),
    "power.draw": ("W", lambda g, s: f"{35.0 + 5.6 * _util(g, s):.2f}"),
    "power.limit": ("W", lambda g, s: "600.00"),
    # An idle GPU runs below its maximum clocks; these stand-ins do not model boost.
    "clocks.sm": ("MHz", lambda g, s: "1980" if _util(g, s) else "345"),
    "clocks.mem": ("MHz", lambda g, s: "2619"),
    "clocks.max.sm": ("MHz", lambda g, s: "1980"),
    "clocks.max.mem": ("MHz", lambda g, s: "2619"),
    "temperature.gpu": ("", lambda g, s: str(32 + _util(g, s) // 3)),
}
ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id"}

AppField = Callable[[Gpu, Entry, int], str]
APP_FIELDS: dict[str, tuple[str, AppField]] = {
    "gpu_uuid": ("", lambda g, e, mib: g.uuid),
    "gpu_name": ("", lambda g, e, mib: g.name),
    "gpu_bus_id": ("", lambda g, e, mib: f"00000000:{0x18 + 0x10 * g.index:02X}:00.0"),
    "pid": ("", lambda g, e, mib: str(e.pid)),
    "process_name": ("", lambda g, e, mib: process_name(e.pid) or e.role),
    "used_memory": ("MiB", lambda g, e, mib: str(mib)),
    "used_gpu_memory": ("MiB", lambda g, e, mib: str(mib)),
}


class UsageError(Exception):
    pass


def _fields(spec: str, known: Mapping[str, tuple[str, object]], aliases: bool) -> list[str]:
    names = [f.strip() for f in spec.split(",") if f.strip()]
    if aliases:
        names = [ALIASES.get(name, name) for name in names]
    for name in names:
        if name not in known:
            raise UsageError(f'Field "{name}" is not a valid field to query.')
    return names


def _row(values: Sequence[str], units: Sequence[str], show_units: bool) -> str:
    if show_units:
        values = [f"{v} {u}" if u else v for v, u in zip(values, units, strict=True)]
    return ", ".join(values)


def _header(names: Sequence[str], units: Sequence[str]) -> str:
    return ", ".join(f"{n} [{u}]" if u else n for n, u in zip(names, units, strict=True))


def render_gpus(state_dir: str, spec: str, fmt: set[str], ids: set[int] | None) -> list[str]:
    names = _fields(spec, GPU_FIELDS, aliases=True)
    units = [GPU_FIELDS[n][0] for n in names]
    snap = Snapshot(state_dir)
    lines = [] if "noheader" in fmt else [_header(names, units)]
    for gpu in snap.gpus:
        if ids is None or gpu.index in ids:
            values = [GPU_FIELDS[n][1](gpu, snap) for n in names]
            lines.append(_row(values, units, "nounits" not in fmt))
    return lines


def render_apps(state_dir: str, spec: str, fmt: set[str], ids: set[int] | None) -> list[str]:
    names = _fields(spec, APP_FIELDS, aliases=False)
    units = [APP_FIELDS[n][0] for n in names]
    snap = Snapshot(state_dir)
    by_index = {g.index: g for g in snap.gpus}
    lines = [] if "noheader" in fmt else [_header(names, units)]
    for gpu_index in sorted(by_index):
        if ids is not None and gpu_index not in ids:
            continue
        for entry in snap.entries:
            mib = entry.memory_mib.get(gpu_index, 0)
            if mib > 0:
                values = [APP_FIELDS[n][1](by_index[gpu_index], entry, mib) for n in names]
                lines.append(_row(values, units, "nounits" not in fmt))
    return lines


def render_list(state_dir: str) -> list[str]:
    return [f"GPU {g.index}: {g.name} (UUID: {g.uuid})" for g in load_inventory(state_dir)]


def render_summary(state_dir: str) -> list[str]:
    snap = Snapshot(state_dir)
    lines = [time.strftime("%a %b %d %H:%M:%S %Y")]
    lines += [
        f"NVIDIA-SMI (specdash simulator)  Driver Version: {DRIVER_VERSION}  "
        f"CUDA Version: {CUDA_VERSION}",
        "",
    ]
    for g in snap.gpus:
        used = snap.used.get(g.index, 0)
        lines.append(f"GPU {g.index}  {g.name}  {used}MiB / {g.total_mib}MiB  {_util(g, snap)}%")
    lines.append("")
    lines.append("Processes:")
    for e in snap.entries:
        for index, mib in sorted(e.memory_mib.items()):
            lines.append(f"  GPU {index}  PID {e.pid}  {process_name(e.pid) or e.role}  {mib}MiB")
    return lines


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nvidia-smi", description="nvidia-smi stand-in (simulator)")
    p.add_argument("--query-gpu", dest="query_gpu")
    p.add_argument("--query-compute-apps", dest="query_apps")
    p.add_argument("--format", default="csv")
    p.add_argument("-L", "--list-gpus", action="store_true")
    p.add_argument("-i", "--id", dest="ids")
    p.add_argument("-lms", "--loop-ms", dest="loop_ms", type=int)
    p.add_argument("-l", "--loop", dest="loop_s", type=int)
    return p


def _emit(lines: list[str], out: TextIO) -> None:
    if lines:
        out.write("\n".join(lines) + "\n")
    out.flush()


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    stream = out or sys.stdout
    args = _parser().parse_args(argv)
    state_dir = default_state_dir()
    fmt = {part.strip() for part in args.format.split(",")}
    ids = {int(i) for i in args.ids.split(",")} if args.ids else None
    if args.query_gpu or args.query_apps:
        if "csv" not in fmt:
            print('"--format" must include csv for queries.', file=sys.stderr)
            return 2
        query = render_gpus if args.query_gpu else render_apps
        spec = args.query_gpu or args.query_apps

        def produce() -> list[str]:
            return query(state_dir, spec, fmt, ids)
    elif args.list_gpus:

        def produce() -> list[str]:
            return render_list(state_dir)
    else:

        def produce() -> list[str]:
            return render_summary(state_dir)

    interval = args.loop_ms / 1000.0 if args.loop_ms else float(args.loop_s or 0)
    try:
        _emit(produce(), stream)
        if interval <= 0:
            return 0
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        next_at = time.monotonic() + interval
        while True:
            time.sleep(max(0.0, next_at - time.monotonic()))
            next_at += interval
            _emit(produce(), stream)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except (KeyboardInterrupt, BrokenPipeError):
        # A reader that went away is the normal end of a loop; silence the exit-time flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
