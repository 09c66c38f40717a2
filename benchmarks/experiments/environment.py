"""The environment record of each run of an experiment, and where two arms' records differ.

Each step's sweep keeps, append-only under ``environment["records"]``, one record per server
it measured: the engine's version as the server reports it, the launch argv and the masked
environment, the model files (path, size, mtime, a sha256 when small), each GPU's name,
driver, clocks and power limit (nvidia-smi), the host's load average when the run started,
and specdash's own version. ``environment_differences`` compares the arms' records: the arms
of an experiment are declared to differ in their profiles' launch (argv and environment), so
anything else that differs (an engine upgraded between runs, another driver, a GPU capped at
a lower power limit, a model file rewritten) is named, so that a comparison can say its arms
differ in more than their declared axis.
"""

from __future__ import annotations

import functools
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from django.conf import settings

from benchmarks.sweeps.models import Sweep
from hosts.agent.parts.probe import FileRecord
from hosts.telemetry.nvidia_smi import parse_gpu_query

# Flags whose value is a model file or directory, per engine (docs/engines.md); `vllm serve
# MODEL` takes the model as its first positional argument.
MODEL_FLAGS = frozenset(
    {
        "--model", "-m", "--model-path", "--tokenizer", "--tokenizer-path",
        "--speculative-draft-model-path", "--spec-draft-model", "-md", "--model-draft",
    }
)  # fmt: skip
PROBE_GPU_FIELDS = (
    "index", "name", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm", "power.limit",
)  # fmt: skip


def model_paths(argv: Sequence[str]) -> list[str]:
    """The model paths ``argv`` names (flag values, ``vllm serve MODEL``), in order, once each."""
    found: list[str] = []
    args = list(argv)
    for i, arg in enumerate(args):
        if arg == "-m" and i == 1 and Path(args[0]).name.startswith("python"):
            continue  # python -m MODULE, not llama-server's -m MODEL
        value: str | None = None
        following = args[i + 1] if i + 1 < len(args) else None
        if "=" in arg and arg.split("=", 1)[0] in MODEL_FLAGS:
            value = arg.split("=", 1)[1]
        elif arg in MODEL_FLAGS or (arg == "serve" and not str(following).startswith("-")):
            value = following
        if value and value not in found:
            found.append(value)
    return found


@functools.cache
def specdash_version() -> str:
    """``git describe`` of the checkout the dashboard runs from, else the package's version."""
    base = Path(settings.BASE_DIR)
    try:
        proc = subprocess.run(
            ["git", "-C", str(base), "describe", "--always", "--dirty", "--tags"],
            capture_output=True, text=True, timeout=5, check=False,
        )  # fmt: skip
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"specdash {version('specdash')}"
    except PackageNotFoundError:
        return "unknown (no git checkout, no installed package)"


def engine_version(server_info: Mapping[str, Any]) -> str | None:
    """The version the server reported about itself at readiness: SGLang's ``/server_info``
    ``version``, vLLM's ``/version``, llama-server's ``/props`` ``build_info``."""
    for path, key in (("version", "version"), ("server_info", "version"), ("props", "build_info")):
        answer = server_info.get(path)
        if isinstance(answer, Mapping) and answer.get(key):
            return f"{path}: {answer[key]}"
    return None


class GpuRecord(TypedDict):
    """One GPU as nvidia-smi reported it (``PROBE_GPU_FIELDS``; its text as given)."""

    index: int
    name: str | None
    driver_version: str | None
    clocks_sm_mhz: str | None
    clocks_mem_mhz: str | None
    clocks_max_sm_mhz: str | None
    power_limit_w: str | None


class RunRecord(TypedDict):
    """One run's environment record (``run_environment_record``), kept append-only under its
    sweep's ``environment["records"]``."""

    engine_version: str | None
    engine_packages: dict[str, dict[str, object]]
    argv: list[str]
    env: dict[str, str]
    model_files: list[FileRecord]
    gpus: list[GpuRecord]
    driver_version: str | None
    cuda_version: str | None
    load_avg: list[float] | None
    host: str | None
    specdash_version: str
    probe_error: str | None


def _gpus(details: str) -> list[GpuRecord]:
    if not details.strip():
        return []
    parsed = parse_gpu_query(details, fields=PROBE_GPU_FIELDS)
    out: list[GpuRecord] = []
    for gpu in parsed.gpus:
        extra = dict(gpu.extra)
        out.append(
            {
                "index": gpu.index,
                "name": gpu.name,
                "driver_version": extra.get("driver_version"),
                "clocks_sm_mhz": extra.get("clocks.sm"),
                "clocks_mem_mhz": extra.get("clocks.mem"),
                "clocks_max_sm_mhz": extra.get("clocks.max.sm"),
                "power_limit_w": extra.get("power.limit"),
            }
        )
    return out


def run_environment_record(
    *, sweep_environment: Mapping[str, Any], probe: Mapping[str, Any], gpu_ids: Sequence[int]
) -> RunRecord:
    """One run's record from its sweep's snapshot (launch, server info) and the host probe
    taken when its server was ready (``benchmarks.experiments.stops.host_probe``)."""
    instance = sweep_environment.get("instance") or {}
    gpus = [
        g
        for g in _gpus(str(probe.get("gpu_details") or ""))
        if not gpu_ids or g["index"] in gpu_ids
    ]
    return {
        "engine_version": engine_version(instance.get("server_info") or {}),
        "engine_packages": probe.get("engines") or {},
        "argv": list(instance.get("launch_argv") or []),
        "env": dict(instance.get("env") or {}),  # masked when the sweep was created
        "model_files": list(probe.get("files") or []),
        "gpus": gpus,
        "driver_version": probe.get("driver_version"),
        "cuda_version": probe.get("cuda_version"),
        "load_avg": probe.get("load_avg"),
        "host": instance.get("host"),
        "specdash_version": specdash_version(),
        "probe_error": probe.get("error"),
    }


def _gpu_key(gpu: Mapping[str, Any]) -> tuple[Any, ...]:
    # The current SM clock follows the load; the maximum and the power limit are settings.
    return (gpu.get("name"), gpu.get("clocks_max_sm_mhz"), gpu.get("power_limit_w"))


def record_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """What differs between two runs' records besides their launch (argv and env): one
    sentence per difference, ``[]`` when nothing else differs."""
    out: list[str] = []
    for key, what in (
        ("engine_version", "engine version"),
        ("engine_packages", "engine packages"),
        ("driver_version", "GPU driver"),
        ("cuda_version", "CUDA version"),
        ("host", "host"),
        ("specdash_version", "specdash version"),
    ):
        if a.get(key) != b.get(key):
            out.append(f"{what}: {a.get(key)!r} vs {b.get(key)!r}")
    gpus_a = [_gpu_key(g) for g in a.get("gpus") or []]
    gpus_b = [_gpu_key(g) for g in b.get("gpus") or []]
    if gpus_a != gpus_b:
        out.append(f"GPUs (name, max SM clock, power limit): {gpus_a} vs {gpus_b}")
    files_a = {f["path"]: f for f in a.get("model_files") or [] if "path" in f}
    files_b = {f["path"]: f for f in b.get("model_files") or [] if "path" in f}
    for path in sorted(files_a.keys() & files_b.keys()):
        fa, fb = files_a[path], files_b[path]
        keys = ("kind", "size", "mtime", "sha256")
        if any(fa.get(k) != fb.get(k) for k in keys):
            out.append(f"model file {path} changed: {_file(fa)} vs {_file(fb)}")
    return out


def _file(record: Mapping[str, Any]) -> str:
    digest = f", sha256 {str(record['sha256'])[:12]}" if record.get("sha256") else ""
    return f"{record.get('kind')} {record.get('size')} bytes, mtime {record.get('mtime')}{digest}"


def experiment_environment_differences(*, experiment_id: int) -> dict[str, list[str]]:
    """Per arm (by label) besides the reference A, what its runs' records differ in from A's
    first run besides their launch; also A's own later runs under A. Arms without a record
    (no probe: a sweep resumed on another server, an older experiment) are left out."""
    first: dict[str, list[RunRecord]] = {}
    sweeps = Sweep.objects.filter(experiment_step__experiment_id=experiment_id).order_by(
        "experiment_step__index"
    )
    for label, environment in sweeps.values_list("experiment_step__arm__label", "environment"):
        first.setdefault(label, []).extend((environment or {}).get("records") or [])
    if not first:
        return {}
    reference = min(first)
    if not first[reference]:
        return {}
    base = first[reference][0]
    out: dict[str, list[str]] = {}
    for label, records in sorted(first.items()):
        seen: list[str] = []
        for record in records:
            for line in record_differences(base, record):
                if line not in seen:
                    seen.append(line)
        if seen:
            out[label] = seen
    return out
