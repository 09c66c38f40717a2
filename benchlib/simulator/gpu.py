from __future__ import annotations

# Standard library only: the nvidia-smi stand-in imports this module with whatever python3 is on
# PATH, outside the project's virtual environment.
import contextlib
import json
import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import TypedDict

GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
COUNT_ENV = "SPECDASH_SIM_GPU_COUNT"
TOTAL_ENV = "SPECDASH_SIM_GPU_TOTAL_MB"
DEFAULT_COUNT = 8
DEFAULT_TOTAL_MIB = 97887


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    total_mib: int


class LedgerEntry(TypedDict):
    """One process's GPU use, as the simulated nvidia-smi reads it from the ledger."""

    pid: int
    start_time: int | None  # /proc start time: a reused pid is told apart
    role: str
    memory_mib: dict[str, int]  # by GPU index
    utilization: dict[str, int]
    updated: float


def _write_atomic(path: str, data: LedgerEntry) -> None:
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def load_inventory(state_dir: str) -> list[Gpu]:
    """The simulated GPUs; the first caller creates the inventory (first writer wins)."""
    path = os.path.join(state_dir, "inventory.json")
    if not os.path.exists(path):
        os.makedirs(os.path.join(state_dir, "ledger"), exist_ok=True)
        os.makedirs(os.path.join(state_dir, "dev"), exist_ok=True)
        count = int(os.environ.get(COUNT_ENV) or DEFAULT_COUNT)
        total = int(os.environ.get(TOTAL_ENV) or DEFAULT_TOTAL_MIB)
        gpus = [
            {"index": i, "uuid": f"GPU-{uuid.uuid4()}", "name": GPU_NAME, "memory_total_mib": total}
            for i in range(count)
        ]
        fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump({"count": count, "gpus": gpus}, f)
        # link() fails if another process created the file meanwhile: keep theirs.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
        os.unlink(tmp)
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    inventory = [
        Gpu(int(g["index"]), str(g["uuid"]), str(g["name"]), int(g["memory_total_mib"]))
        for g in data["gpus"]
    ]
    for gpu in inventory:
        device = device_path(state_dir, gpu.index)
        if not os.path.exists(device):
            os.makedirs(os.path.dirname(device), exist_ok=True)
            with open(device, "a", encoding="utf-8"):
                pass
    return inventory


def device_path(state_dir: str, index: int) -> str:
    return os.path.join(state_dir, "dev", f"nvidia{index}")


def proc_start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time in clock ticks), None if the pid is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def is_live(pid: int, start_time: int) -> bool:
    """The same process (not a reused pid) still exists and is not a zombie."""
    return proc_start_time(pid) == start_time and proc_state(pid) not in (None, "Z", "X")


def process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return ""
    return raw.split(b"\0", 1)[0].decode(errors="replace").split(" ", 1)[0]


class Holding:
    """This process's entry in the ledger plus open fds on the GPUs' device files."""

    def __init__(self, state_dir: str, memory_mib: dict[int, int], role: str) -> None:
        self.state_dir = state_dir
        self.pid = os.getpid()
        self.memory_mib = memory_mib
        self.role = role
        self.utilization: dict[int, int] = {}
        self.path = os.path.join(state_dir, "ledger", f"{self.pid}.json")
        self._fds = [os.open(device_path(state_dir, i), os.O_RDONLY) for i in memory_mib]
        self.write()

    def write(self) -> None:
        _write_atomic(
            self.path,
            LedgerEntry(
                pid=self.pid,
                start_time=proc_start_time(self.pid),
                role=self.role,
                memory_mib={str(k): v for k, v in self.memory_mib.items()},
                utilization={str(k): v for k, v in self.utilization.items()},
                updated=time.time(),
            ),
        )

    def release(self) -> None:
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


@dataclass(frozen=True)
class Entry:
    pid: int
    role: str
    memory_mib: dict[int, int]
    utilization: dict[int, int]
    updated: float


def live_entries(state_dir: str) -> list[Entry]:
    """Ledger entries of processes still alive (dead, reused or zombie pids are skipped)."""
    folder = os.path.join(state_dir, "ledger")
    entries: list[Entry] = []
    try:
        names = sorted(os.listdir(folder))
    except FileNotFoundError:
        return entries
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            with open(os.path.join(folder, name), encoding="utf-8") as f:
                data = json.load(f)
            pid, start = int(data["pid"]), data.get("start_time")
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if start is None or not is_live(pid, int(start)):
            continue
        entries.append(
            Entry(
                pid=pid,
                role=str(data.get("role", "")),
                memory_mib={int(k): int(v) for k, v in data.get("memory_mib", {}).items()},
                utilization={int(k): int(v) for k, v in data.get("utilization", {}).items()},
                updated=float(data.get("updated", 0.0)),
            )
        )
    return entries


def split_memory(gpus: tuple[int, ...], workers: int, per_gpu_mib: int) -> list[dict[int, int]]:
    """Per-holder memory: each TP worker holds its share of the GPUs it is placed on.

    With no workers the main process holds everything (one holder). Workers are placed on GPUs
    round-robin; a GPU's memory is split evenly between the workers placed on it.
    """
    holders = max(1, workers)
    placement: list[list[int]] = [[] for _ in range(holders)]
    for i, gpu in enumerate(gpus):
        placement[i % holders].append(gpu)
    for rank in range(holders):
        if not placement[rank] and gpus:
            placement[rank].append(gpus[rank % len(gpus)])
    sharers = {gpu: sum(gpu in p for p in placement) for gpu in gpus}
    return [{gpu: per_gpu_mib // sharers[gpu] for gpu in p} for p in placement]
