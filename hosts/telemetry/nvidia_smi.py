"""Parsers for `nvidia-smi` CSV queries, its `-lms` stream and `-L` listing.

Nothing here runs a process: callers get an argv from `gpu_query_argv` and friends, run it
through a transport, and hand the text back. Where Python runs on the GPU host itself NVML
(`pynvml`) is the better source; these parsers exist because most hosts are reached over
ssh / `pct exec`, where the CLI is what is there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

GPU_QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "memory.total",
    "memory.used",
    "memory.free",
    "utilization.gpu",
    "power.draw",
    "temperature.gpu",
)
COMPUTE_APPS_QUERY_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "process_name", "used_memory")

# The header nvidia-smi prints does not always repeat the query name (`used_memory` comes back
# as `used_gpu_memory [MiB]`), and several query names are synonyms.
_FIELD_ALIASES: Mapping[str, str] = {
    "gpu_uuid": "uuid",
    "gpu_name": "name",
    "gpu_bus_id": "pci.bus_id",
    "used_gpu_memory": "used_memory",
    "power.draw.instant": "power.draw",
}
_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")
_TRAILING_UNIT = re.compile(r"^\s*([-+0-9.eE]+)\s*(?:MiB|%|W|C|MHz|KiB|GiB)?\s*$")


@dataclass(frozen=True)
class GpuSample:
    index: int
    uuid: str | None
    name: str | None
    memory_total_mib: int | None
    memory_used_mib: int | None
    memory_free_mib: int | None
    utilization_pct: float | None
    power_w: float | None
    temperature_c: float | None
    # Fields queried beyond the standard set (`timestamp`, `clocks.sm`, ...), raw text.
    extra: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuQueryResult:
    gpus: tuple[GpuSample, ...]
    # Lines that were not a full row: truncated output, driver error messages, blank GPUs.
    skipped_lines: tuple[str, ...]
    # Field order taken from a header line (`--format=csv` without `noheader`), else None.
    header: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ComputeApp:
    # CAUTION: inside an LXC container the driver reports HOST pids (no pid-namespace support),
    # or none at all. A pid read here may belong to an unrelated process in the container's
    # namespace, or not exist there: never signal or kill it. Find real holders with
    # `fuser -v /dev/nvidia*` inside the container, or map host -> container pid on the
    # Proxmox host via `/proc/<pid>/status` (NSpid:) and `/proc/<pid>/cgroup` (lxc/<vmid>).
    gpu_uuid: str
    pid: int | None
    process_name: str | None
    used_memory_mib: int | None


@dataclass(frozen=True)
class MigDevice:
    profile: str
    device: int
    uuid: str


@dataclass(frozen=True)
class ListedGpu:
    index: int
    name: str
    uuid: str
    mig_devices: tuple[MigDevice, ...] = ()


@dataclass(frozen=True)
class GpuSampleSet:
    """One tick of a `-lms` stream: every GPU's line from that tick."""

    seq: int
    stream: int
    gpus: tuple[GpuSample, ...]
    # False when fewer GPUs arrived than the stream's full ticks carry (a stream cut mid-tick,
    # a GPU that fell off the bus, a line that could not be parsed).
    complete: bool


def gpu_query_argv(
    loop_ms: int | None = None, *, fields: Sequence[str] = GPU_QUERY_FIELDS
) -> list[str]:
    """The argv for one GPU query, or for a stream of them every `loop_ms` milliseconds."""
    argv = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
    if loop_ms is not None:
        if loop_ms <= 0:
            raise ValueError(f"loop_ms must be positive, got {loop_ms}")
        argv += ["-lms", str(loop_ms)]
    return argv


def compute_apps_query_argv() -> list[str]:
    return [
        "nvidia-smi",
        f"--query-compute-apps={','.join(COMPUTE_APPS_QUERY_FIELDS)}",
        "--format=csv,noheader,nounits",
    ]


def gpu_list_argv() -> list[str]:
    return ["nvidia-smi", "-L"]


def _canonical(name: str) -> str:
    name = _HEADER_UNIT.sub("", name.strip())
    return _FIELD_ALIASES.get(name, name)


def _is_missing(raw: str) -> bool:
    # `[N/A]`, `[Not Supported]`, `[Unknown Error]`, `[GPU is lost]`, `N/A`, empty.
    text = raw.strip()
    return not text or text.startswith("[") or text.upper() == "N/A"


def _to_float(raw: str) -> float | None:
    if _is_missing(raw):
        return None
    match = _TRAILING_UNIT.match(raw)
    if match is None:
        return None
    try:
        value = float(match.group(1))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _to_int(raw: str) -> int | None:
    value = _to_float(raw)
    return None if value is None else round(value)


def _to_text(raw: str) -> str | None:
    return None if _is_missing(raw) else raw.strip()


def _header_fields(line: str, known: Iterable[str]) -> tuple[str, ...] | None:
    # A header's first column is a field name; a data row's is a value (an index, a uuid).
    parts = tuple(_canonical(part) for part in line.split(","))
    return parts if parts[0] in {_canonical(name) for name in known} else None


_STANDARD = frozenset(_canonical(name) for name in GPU_QUERY_FIELDS)


def parse_gpu_line(line: str, fields: Sequence[str] = GPU_QUERY_FIELDS) -> GpuSample | None:
    """One CSV row in the order of `fields`; None when the row is not a full, indexed GPU row."""
    names = [_canonical(name) for name in fields]
    if "index" not in names:
        raise ValueError("the GPU query must include the index field")
    parts = line.split(",")
    if len(parts) != len(names):
        return None
    values = dict(zip(names, parts, strict=True))
    index = _to_int(values["index"])
    if index is None:
        return None
    return GpuSample(
        index=index,
        uuid=_to_text(values.get("uuid", "")),
        name=_to_text(values.get("name", "")),
        memory_total_mib=_to_int(values.get("memory.total", "")),
        memory_used_mib=_to_int(values.get("memory.used", "")),
        memory_free_mib=_to_int(values.get("memory.free", "")),
        utilization_pct=_to_float(values.get("utilization.gpu", "")),
        power_w=_to_float(values.get("power.draw", "")),
        temperature_c=_to_float(values.get("temperature.gpu", "")),
        extra={k: v.strip() for k, v in values.items() if k not in _STANDARD},
    )


def parse_gpu_query(text: str, fields: Sequence[str] = GPU_QUERY_FIELDS) -> GpuQueryResult:
    """Parse the whole output of one `--query-gpu` call (with or without a header line)."""
    gpus: list[GpuSample] = []
    skipped: list[str] = []
    header: tuple[str, ...] | None = None
    order: Sequence[str] = fields
    for line in text.splitlines():
        if not line.strip():
            continue
        if header is None and not gpus:
            found = _header_fields(line, fields)
            if found is not None:
                header = order = found
                continue
        sample = parse_gpu_line(line, order)
        if sample is None:
            skipped.append(line)
        else:
            gpus.append(sample)
    return GpuQueryResult(gpus=tuple(gpus), skipped_lines=tuple(skipped), header=header)


class GpuStreamAssembler:
    """Groups the lines of `nvidia-smi --query-gpu=... -lms N` into one set per tick.

    Rule: nvidia-smi prints every GPU once per tick in ascending index order, so a tick ends
    when the index does not increase (a repeat, or a lower index after a restart). Once a full
    tick has been seen (or `expected_gpus` is given), a set is also emitted as soon as it
    reaches that size, so the newest tick is not held back until the next one starts. The
    `timestamp` field is not used as the key: each row is stamped when that GPU was read, so
    rows of one tick can carry different timestamps.

    A restarted stream (the ssh or nvidia-smi process died and was started again) should be
    announced with `restart()`: it drops the half-written line the old process left, which would
    otherwise be glued onto the new stream's first line. Unannounced, that glued line is skipped
    (counted in `skipped_lines`) and the cut tick and the first new one come out incomplete;
    nothing is mixed across ticks. A header line mid-stream is also taken as a restart.
    """

    def __init__(
        self, fields: Sequence[str] = GPU_QUERY_FIELDS, *, expected_gpus: int | None = None
    ) -> None:
        self._fields: Sequence[str] = fields
        self._expected = expected_gpus
        self._learned = 0
        self._buffer = ""
        self._current: list[GpuSample] = []
        self._seq = 0
        self._lines_in_stream = 0
        self.stream = 0
        self.skipped_lines = 0
        self.dropped_partial_lines = 0

    def feed(self, chunk: str) -> list[GpuSampleSet]:
        """Feed raw output; only newline-terminated lines are parsed, the rest is buffered."""
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split("\n")
        out: list[GpuSampleSet] = []
        for line in lines:
            out += self.feed_line(line)
        return out

    def feed_line(self, line: str) -> list[GpuSampleSet]:
        line = line.rstrip("\r")
        if not line.strip():
            return []
        header = _header_fields(line, self._fields)
        if header is not None:
            out = self._close(by_next_tick=False)
            if self._lines_in_stream:
                self._new_stream()
            self._fields = header
            return out
        self._lines_in_stream += 1
        sample = parse_gpu_line(line, self._fields)
        if sample is None:
            self.skipped_lines += 1
            return []
        out = []
        if self._current and sample.index <= self._current[-1].index:
            out += self._close(by_next_tick=True)
        self._current.append(sample)
        if len(self._current) == self._full_size():
            out += self._close(by_next_tick=False)
        return out

    def restart(self) -> list[GpuSampleSet]:
        """The producing process was restarted: flush the partial tick, drop any partial line."""
        if self._buffer:
            self.dropped_partial_lines += 1
            self._buffer = ""
        out = self._close(by_next_tick=False)
        self._new_stream()
        return out

    def close(self) -> list[GpuSampleSet]:
        """End of stream: a buffered line without its newline may be cut short, so drop it."""
        if self._buffer.strip():
            self.dropped_partial_lines += 1
        self._buffer = ""
        return self._close(by_next_tick=False)

    def _new_stream(self) -> None:
        self.stream += 1
        self._lines_in_stream = 0

    def _full_size(self) -> int:
        return self._expected if self._expected is not None else self._learned

    def _close(self, *, by_next_tick: bool) -> list[GpuSampleSet]:
        if not self._current:
            return []
        size = len(self._current)
        if by_next_tick and self._expected is None:
            self._learned = max(self._learned, size)
        full = self._full_size()
        complete = size >= full if full else by_next_tick
        result = GpuSampleSet(
            seq=self._seq, stream=self.stream, gpus=tuple(self._current), complete=complete
        )
        self._seq += 1
        self._current = []
        return [result]


def parse_compute_apps(
    text: str, fields: Sequence[str] = COMPUTE_APPS_QUERY_FIELDS
) -> list[ComputeApp]:
    """Parse `--query-compute-apps=gpu_uuid,pid,process_name,used_memory` output.

    See the caveat on `ComputeApp`: the pids are for display, never for killing.
    """
    names = [_canonical(name) for name in fields]
    apps: list[ComputeApp] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split(",")
        if parts and _canonical(parts[0]) in {"uuid", "pid"}:
            names = [_canonical(part) for part in parts]
            continue
        if len(parts) > len(names) and "process_name" in names:
            # A process path containing commas: glue the surplus back into the name.
            at = names.index("process_name")
            surplus = len(parts) - len(names)
            parts[at : at + surplus + 1] = [",".join(parts[at : at + surplus + 1])]
        if len(parts) != len(names):
            continue
        values = dict(zip(names, parts, strict=True))
        uuid = _to_text(values.get("uuid", ""))
        if uuid is None:
            continue
        apps.append(
            ComputeApp(
                gpu_uuid=uuid,
                pid=_to_int(values.get("pid", "")),
                process_name=_to_text(values.get("process_name", "")),
                used_memory_mib=_to_int(values.get("used_memory", "")),
            )
        )
    return apps


_LIST_GPU = re.compile(r"^GPU\s+(\d+):\s+(.*?)\s+\(UUID:\s*([^)\s]+)\)\s*$")
_LIST_MIG = re.compile(r"^\s+MIG\s+(\S+)\s+Device\s+(\d+):\s+\(UUID:\s*([^)\s]+)\)\s*$")


def parse_gpu_list(text: str) -> list[ListedGpu]:
    """Parse `nvidia-smi -L`, including the indented MIG device lines under a GPU."""
    gpus: list[ListedGpu] = []
    for line in text.splitlines():
        gpu = _LIST_GPU.match(line)
        if gpu is not None:
            gpus.append(ListedGpu(index=int(gpu.group(1)), name=gpu.group(2), uuid=gpu.group(3)))
            continue
        mig = _LIST_MIG.match(line)
        if mig is not None and gpus:
            parent = gpus[-1]
            device = MigDevice(profile=mig.group(1), device=int(mig.group(2)), uuid=mig.group(3))
            gpus[-1] = ListedGpu(
                index=parent.index,
                name=parent.name,
                uuid=parent.uuid,
                mig_devices=(*parent.mig_devices, device),
            )
    return gpus
