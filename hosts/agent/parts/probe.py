"""probe: what an environment record keeps of the host, its GPUs and model files."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from typing import TypedDict

from hosts.agent.parts.base import AgentError
from hosts.agent.parts.procfs import read_boot_id, read_environ_entries


class DriverVersions(TypedDict):
    driver_version: str | None
    cuda_version: str | None


class _NvidiaSmiList(TypedDict):
    available: bool
    gpus: list[str]  # `nvidia-smi -L` lines
    error: str | None


class NvidiaSmi(_NvidiaSmiList, total=False):
    # Only when nvidia-smi answered.
    driver_version: str | None
    cuda_version: str | None
    details: str  # PROBE_GPU_FIELDS as CSV rows ("" when that query failed)


class _FileKind(TypedDict):
    path: str
    kind: str  # "file", "dir" or "missing"


class FileRecord(_FileKind, total=False):
    """A model file or folder as a run's environment record keeps it."""

    size: int
    mtime: float
    files: int  # a folder's file count
    sha256: str  # a file up to HASH_MAX_BYTES
    error: str


class ContainerFacts(TypedDict):
    detected: bool
    evidence: list[str]


class ProbeAnswer(TypedDict):
    ok: bool
    hostname: str
    uid: int
    user: str | None
    kernel: str
    machine: str
    python: str
    executable: str
    boot_id: str | None
    container: ContainerFacts
    nvidia_smi: NvidiaSmi
    # By interpreter: each engine package's version (None: not installed), or {"error": why}.
    engines: dict[str, dict[str, object]]
    load_avg: list[float]
    files: list[FileRecord]


_ENGINE_VERSIONS = """
import json
try:
    from importlib import metadata
except ImportError:
    metadata = None
out = {}
for name in ("sglang", "vllm", "torch"):
    try:
        out[name] = metadata.version(name) if metadata else None
    except Exception:
        out[name] = None
print(json.dumps(out))
"""


def _container_evidence() -> list[str]:
    evidence: list[str] = []
    for path in ("/.dockerenv", "/run/.containerenv"):
        if os.path.exists(path):
            evidence.append(path)
    try:
        with open("/proc/1/cgroup") as f:
            cgroup = f.read()
        for word in ("docker", "lxc", "kubepods", "containerd", "podman"):
            if word in cgroup:
                evidence.append(f"/proc/1/cgroup mentions {word}")
    except OSError:
        pass
    entries = read_environ_entries(1) or []
    for entry in entries:
        if entry.startswith(b"container="):
            evidence.append("pid 1 environ {}".format(entry.decode("utf-8", "replace")))
    exe = shutil.which("systemd-detect-virt")
    if exe is not None:
        try:
            proc = subprocess.run(
                [exe, "--container"], capture_output=True, text=True, timeout=3, check=False
            )
            if proc.returncode == 0 and proc.stdout.strip() not in ("", "none"):
                evidence.append(f"systemd-detect-virt: {proc.stdout.strip()}")
        except (OSError, subprocess.TimeoutExpired):
            pass
    return evidence


def _driver_versions(exe: str) -> DriverVersions:
    """Driver and CUDA versions from the plain nvidia-smi header, as an operator reads them."""
    try:
        proc = subprocess.run([exe], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {"driver_version": None, "cuda_version": None}
    driver = re.search(r"Driver Version:\s*([0-9][0-9.]*)", proc.stdout)
    cuda = re.search(r"CUDA Version:\s*([0-9][0-9.]*)", proc.stdout)
    return {
        "driver_version": driver.group(1) if driver else None,
        "cuda_version": cuda.group(1) if cuda else None,
    }


# What a run's environment record keeps of each GPU: clocks and the power limit change what
# a GPU delivers, and differ between two arms on "the same" hardware.
PROBE_GPU_FIELDS = "index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit"
# Model files up to this size are hashed (a small draft or test model); hashing a 100 GB
# checkpoint would delay every start by minutes, so size and mtime stand for those.
HASH_MAX_BYTES = 64 * 1024 * 1024
PROBE_MAX_FILES = 16


def _file_record(path: str) -> FileRecord:
    import hashlib

    try:
        st = os.stat(path)
    except OSError as exc:
        return {"path": path, "kind": "missing", "error": exc.strerror or str(exc)}
    if os.path.isdir(path):
        size = count = 0
        newest = st.st_mtime
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_file():
                    info = entry.stat()
                    size += info.st_size
                    count += 1
                    newest = max(newest, info.st_mtime)
        return {"path": path, "kind": "dir", "size": size, "mtime": newest, "files": count}
    record: FileRecord = {"path": path, "kind": "file", "size": st.st_size,
                              "mtime": st.st_mtime}  # fmt: skip
    if st.st_size <= HASH_MAX_BYTES:
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            record["sha256"] = digest.hexdigest()
        except OSError as exc:
            record["error"] = exc.strerror or str(exc)
    return record


def _gpu_details(exe: str) -> str:
    try:
        proc = subprocess.run(
            [exe, f"--query-gpu={PROBE_GPU_FIELDS}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


def cmd_probe(args: dict[str, object]) -> ProbeAnswer:
    import platform

    pythons = args.get("pythons") or []
    if not isinstance(pythons, list) or not all(isinstance(p, str) for p in pythons):
        raise AgentError("pythons must be a list of interpreter paths")
    files = args.get("files") or []
    if not isinstance(files, list) or not all(isinstance(p, str) for p in files):
        raise AgentError("files must be a list of paths")
    load_avg = list(os.getloadavg())  # first: the load as the run starts, before our own work
    try:
        import pwd

        user: str | None = pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        user = None
    nvidia: NvidiaSmi = {"available": False, "gpus": [], "error": None}
    exe = shutil.which("nvidia-smi")
    if exe is None:
        nvidia["error"] = "nvidia-smi not found on PATH"
    else:
        try:
            proc = subprocess.run(
                [exe, "-L"], capture_output=True, text=True, timeout=10, check=False
            )
            nvidia["available"] = proc.returncode == 0
            nvidia["gpus"] = [line for line in proc.stdout.splitlines() if line.strip()]
            if proc.returncode != 0:
                nvidia["error"] = (proc.stderr or proc.stdout).strip()[-500:]
            else:
                versions = _driver_versions(exe)
                nvidia["driver_version"] = versions["driver_version"]
                nvidia["cuda_version"] = versions["cuda_version"]
                nvidia["details"] = _gpu_details(exe)
        except (OSError, subprocess.TimeoutExpired) as exc:
            nvidia["error"] = str(exc)
    engines: dict[str, dict[str, object]] = {}
    budget_end = time.monotonic() + 5.0
    for python in [sys.executable, *pythons]:
        left = budget_end - time.monotonic()
        if left <= 0:
            engines[python] = {"error": "time budget spent"}
            continue
        try:
            proc = subprocess.run(
                [python, "-c", _ENGINE_VERSIONS],
                capture_output=True,
                text=True,
                timeout=left,
                check=False,
            )
            engines[python] = json.loads(proc.stdout.strip().splitlines()[-1])
        except (OSError, ValueError, IndexError, subprocess.TimeoutExpired) as exc:
            engines[python] = {"error": str(exc) or type(exc).__name__}
    evidence = _container_evidence()
    uname = os.uname()
    return {
        "ok": True,
        "hostname": socket.gethostname(),
        "uid": os.getuid(),
        "user": user,
        "kernel": f"{uname.sysname} {uname.release}",
        "machine": uname.machine,
        "python": platform.python_version(),
        "executable": sys.executable,
        "boot_id": read_boot_id(),
        "container": {"detected": bool(evidence), "evidence": evidence},
        "nvidia_smi": nvidia,
        "engines": engines,
        "load_avg": load_avg,
        "files": [_file_record(p) for p in files[:PROBE_MAX_FILES]],
    }
