"""GPU memory and its holders, from nvidia-smi and /dev/nvidia* file descriptors."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import TypedDict

from hosts.agent.parts.base import NVIDIA_INDEXED_RE, NVIDIA_SHARED_RE
from hosts.agent.parts.procfs import ProcInfo, list_pids, proc_info, read_stat


class _GpuReading(TypedDict):
    index: int
    used_mb: int | None
    total_mb: int | None


class GpuDevice(_GpuReading, total=False):
    # Preflight's verdict: its memory in use is over the threshold (set by preflight only).
    held: bool


class _GpuMemoryReading(TypedDict):
    available: bool
    error: str | None
    devices: list[GpuDevice]


class GpuHolder(ProcInfo):
    """A process with a GPU device file open: which GPUs (all of them for a shared node)."""

    gpus: list[int]
    all_gpus: bool
    devices: list[str]


class GpuMemory(_GpuMemoryReading, total=False):
    holders: list[GpuHolder]  # added by preflight


def _mib(value: str) -> int | None:
    try:
        return int(float(value.strip()))
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def nvidia_smi_memory() -> GpuMemory:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"available": False, "error": "nvidia-smi not found on PATH", "devices": []}
    cmd = [
        exe,
        "--query-gpu=index,memory.used,memory.total",
        "--format=csv,noheader,nounits",
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=15, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"available": False, "error": f"nvidia-smi failed: {exc}", "devices": []}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-500:]
        return {
            "available": False,
            "error": f"nvidia-smi exited {proc.returncode}: {tail}",
            "devices": [],
        }
    devices: list[GpuDevice] = []
    for line in proc.stdout.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 3 or not cols[0].isdigit():
            continue
        devices.append({"index": int(cols[0]), "used_mb": _mib(cols[1]), "total_mb": _mib(cols[2])})
    return {"available": True, "error": None, "devices": devices}


def gpu_holders(
    gpus: list[int] | None = None, device_dirs: list[str] | None = None
) -> list[GpuHolder]:
    """Processes with an open fd on */dev/nvidia<N> (or nvidiactl/nvidia-uvm: all GPUs).

    device_dirs limits the scan to device files in those directories (["/dev"] for real GPUs,
    a simulator's "<state-dir>/dev" for simulated ones); None accepts them anywhere.
    """
    skip = {os.getpid()}
    prefixes = [d.rstrip("/") + "/" for d in device_dirs] if device_dirs else None
    holders: list[GpuHolder] = []
    for pid in list_pids():
        if pid in skip:
            continue
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        indices: set[int] = set()
        shared = False
        devices: set[str] = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.endswith(" (deleted)"):
                target = target[: -len(" (deleted)")]
            if prefixes is not None and not any(target.startswith(p) for p in prefixes):
                continue
            m = NVIDIA_INDEXED_RE.search(target)
            if m is not None:
                indices.add(int(m.group(1)))
                devices.add(target)
            elif NVIDIA_SHARED_RE.search(target) is not None:
                shared = True
                devices.add(target)
        if not devices:
            continue
        if gpus and not shared and not indices.intersection(gpus):
            continue
        st = read_stat(pid)
        if st is None:
            continue
        info: GpuHolder = {
            **proc_info(st),
            "gpus": sorted(indices),
            "all_gpus": shared,
            "devices": sorted(devices),
        }
        holders.append(info)
    return holders
