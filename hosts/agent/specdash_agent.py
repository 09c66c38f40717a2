"""specdash far-side process agent.

Sent as a script on stdin and run as ``python3 - <command> '<json-args>'`` on the GPU host (or
inside its container). Only the Python 3.8+ standard library and a Linux /proc are assumed.

Output: the first line is ``SPECDASH-BEGIN`` (every hop was entered), the last line is
``SPECDASH-RESULT <json>``: ``{"ok": true, ...}`` or ``{"ok": false, "error": "...", ...}``
(an unexpected exception adds ``"traceback"``). The exit status is 0 whenever RESULT was printed.

Commands (JSON arguments; ``?`` marks optional keys, defaults in brackets):

preflight {port?, gpus? [[]], binary?, workdir?, gpu_mem_threshold_mb? [1024], device_dirs?}
  -> {ok, problems: [str], port: PORT, gpus: GPUS, binary: {name, path, found},
      workdir: {path, exists}}
  PORT = {port, free, listening, in_use, holders: [PROC], bind_errors: {addr: str}, notes: [str]}
  GPUS = {available, error, devices: [{index, used_mb, total_mb, held}], holders: [HOLDER]}
  ``ok`` is false exactly when ``problems`` is not empty.

launch {run_id, argv: [str], env? {str: str}, workdir?, run_dir, port?}
  -> {ok, already_running, run_id, pid, supervisor_pid, pgid, sid, start_time, boot_id,
      cmdline: [str], log_path, run_dir}
  A refusal (live members without a live server, exec failure) is ok false with ``error``.
  ``{uid}`` in run_dir (and in status/stop/log_tail's) is this user's uid. run_dir and its
  parent (the run root) are created 0700; an existing one that is a symlink, belongs to
  another user or is writable by others is refused ("unsafe run directory: ..."), as is a
  parent chain someone else could swap out (not root's or ours, or writable and not sticky).
  The server runs in its own process group inside the supervisor's session; the supervisor
  writes ``<run_dir>/server.json`` (the launch answer) and, when the server exits,
  ``<run_dir>/exit_code``: the exit status, or ``-N`` when signal N killed it. A server that
  dies of SIGTERM therefore records -15; 143 appears only when the server itself exits with
  128+15 (a shell wrapper does that). 127/126 mean the argv could not be executed.

status {run_id, pid, start_time, run_dir?, port?, pgid?, sid?, log_lines? [50]}
  -> {ok, alive, state, exit_code: int|null, members: [MEMBER], port: PORT|null, log: LOG|null}

members {run_id, pid?, pgid?, sid?, start_time?}
  -> {ok, members: [MEMBER], unreadable_environ: [pid], notes: [str]}
  MEMBER = PROC + {found_by: ["pid"|"pgid"|"sid"|"marker"], role: "server"|"supervisor"|"process",
                   environ_readable: bool}
  PROC = {pid, ppid, pgid, sid, state, comm, cmdline: [str], start_time}
  pgid/sid matches need start_time: a process that started before the server is a member only
  when it carries the marker ``SPECDASH_RUN_ID=<run_id>`` (pid reuse guard). status, members,
  stop and verify also take ``boot_id``: when the host rebooted since the launch, the recorded
  pid/pgid/sid are ignored and only the marker counts.

stop {run_id, pid?, pgid?, sid?, start_time?, supervisor_pid?, run_dir?, grace_seconds? [10],
      kill_wait_seconds? [5]}
  -> {ok, clean, terminated: [pid], killed: [pid], survivors: [pid], zombies: [pid],
      d_state: [pid], skipped: [{pid, reason}], exit_code: int|null, duration}
  ``clean`` is false when survivors remain; ``verify`` is the authority on "stopped".

verify {run_id, port?, gpus? [[]], baseline_gpu_mem_mb? {index: mib}, tolerance_mb? [512],
        pid?, pgid?, sid?, start_time?, device_dirs?}
  -> {ok, verdict: "stopped"|"dirty", reasons: [str], members: [MEMBER], port: PORT|null,
      gpu_memory: "unknown"|{index: {used_mb, baseline_mb, ok}}, holders: [HOLDER]}
  ``ok`` is null when the reading or the baseline is missing (not compared, not a pass).
  HOLDER = PROC + {gpus: [int], all_gpus: bool, devices: [path], counts: bool}
  Holders come only from a scan of /proc/*/fd for ``*/dev/nvidia<N>``, ``*/dev/nvidiactl`` and
  ``*/dev/nvidia-uvm`` (``all_gpus``); nvidia-smi pids are never used (in a container they are
  host pids). A holder ``counts`` (makes the verdict dirty) when it holds one of the instance's
  numbered devices, or when it is a member: every CUDA process on the host holds nvidiactl,
  so a neighbour on another GPU must not make every stop dirty. ``device_dirs`` (a list of
  directories, e.g. ["/dev"] or a simulator's "<state-dir>/dev") limits which device files
  count; by default they count wherever they are.

kill_pids {pids: [{pid, start_time}], signal? ["KILL"], wait_seconds? [0]}
  -> {ok, signalled: [pid], skipped: [{pid, reason}], exited: [pid], alive: [pid]}

log_tail {run_dir, lines? [50], max_bytes? [65536]}
  -> {ok, path, exists, size, lines: [str], truncated}

probe {pythons? [[]], files? [[]]}
  -> {ok, hostname, uid, user, kernel, python, executable, container: {detected, evidence},
      nvidia_smi: {available, gpus: [str], error, driver_version, cuda_version, details},
      engines: {python: {package: version|null}}, load_avg: [1, 5, 15 min],
      files: [{path, kind: file|dir|missing, size, mtime, sha256?, files?, error?}]}
  ``details`` is nvidia-smi's CSV of PROBE_GPU_FIELDS (no header, no units), "" without it.
  ``files`` (model paths, at most 16): a file's size and mtime, and its sha256 when at most
  HASH_MAX_BYTES; a directory's regular files summed (size, newest mtime, count), not hashed.

Fencing: any command whose arguments have both ``run_dir`` and ``controller`` (an integer,
the id of the job driving that run; a job that takes over has a higher one) is checked under
an flock on ``<run_dir>/controller.lock`` held for the whole command: a controller lower than
the highest one seen is refused (ok false, ``superseded: true``) and nothing is done. Every
check appends ``{t, controller, command, accepted}`` to ``<run_dir>/controllers.log`` (moved to
``controllers.log.1`` past 1 MiB). The run directory is expanded and checked as launch's is.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback
from typing import Any, NamedTuple

BEGIN_MARKER = "SPECDASH-BEGIN"
RESULT_MARKER = "SPECDASH-RESULT"
MARKER_VAR = "SPECDASH_RUN_ID"
SUPERVISOR_COMM = "specdash-sup"
CMDLINE_LIMIT = 4096
RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}$")
NVIDIA_INDEXED_RE = re.compile(r"/dev/nvidia([0-9]+)$")
NVIDIA_SHARED_RE = re.compile(r"/dev/nvidia(?:ctl|-uvm|-uvm-tools)$")
POLL_SECONDS = 0.1


class AgentError(Exception):
    """A refusal or bad input: reported as ok false with its message, no traceback."""


# --------------------------------------------------------------------------- /proc


class ProcStat(NamedTuple):
    pid: int
    comm: str
    state: str
    ppid: int
    pgid: int
    sid: int
    start_time: int


def read_stat(pid: int) -> ProcStat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    # comm may contain spaces and parentheses: it ends at the last ")".
    open_at = raw.find("(")
    close_at = raw.rfind(")")
    if open_at < 0 or close_at < 0:
        return None
    rest = raw[close_at + 2 :].split()
    if len(rest) < 20:
        return None
    return ProcStat(
        pid=pid,
        comm=raw[open_at + 1 : close_at],
        state=rest[0],
        ppid=int(rest[1]),
        pgid=int(rest[2]),
        sid=int(rest[3]),
        start_time=int(rest[19]),  # field 22: start time in clock ticks since boot
    )


def read_cmdline(pid: int, limit: int = CMDLINE_LIMIT) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read(limit)
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.rstrip(b"\0").split(b"\0") if part]


def read_environ_entries(pid: int) -> list[bytes] | None:
    """The NUL-separated environ entries, or None when unreadable (permission, gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw.split(b"\0")


def list_pids() -> list[int]:
    return sorted(int(name) for name in os.listdir("/proc") if name.isdigit())


def protected_pids() -> set[int]:
    """The agent, its ancestors (the ssh/lxc-attach chain) and the kernel's own processes."""
    pids = {0, 1, 2}
    pid = os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        st = read_stat(pid)
        if st is None:
            break
        pid = st.ppid
    return pids


def proc_info(st: ProcStat) -> dict[str, Any]:
    return {
        "pid": st.pid,
        "ppid": st.ppid,
        "pgid": st.pgid,
        "sid": st.sid,
        "state": st.state,
        "comm": st.comm,
        "cmdline": read_cmdline(st.pid),
        "start_time": st.start_time,
    }


def read_boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def is_alive(pid: int, start_time: int | None) -> bool:
    st = read_stat(pid)
    if st is None or st.state in ("Z", "X"):
        return False
    return start_time is None or st.start_time == start_time


# --------------------------------------------------------------------------- members


def find_members(
    run_id: str,
    pid: int | None = None,
    pgid: int | None = None,
    sid: int | None = None,
    start_time: int | None = None,
) -> dict[str, Any]:
    """Every process of the instance: by pgid, by session, or by the environment marker."""
    marker = (f"{MARKER_VAR}={run_id}").encode()
    skip = protected_pids()
    members: list[dict[str, Any]] = []
    unreadable: list[int] = []
    notes: list[str] = []
    for candidate in list_pids():
        if candidate in skip:
            continue
        st = read_stat(candidate)
        if st is None or st.ppid == 2:  # gone, or a kernel thread
            continue
        found: list[str] = []
        if pid is not None and candidate == pid and st.start_time == start_time:
            found.append("pid")
        if start_time is not None:
            if pgid is not None and st.pgid == pgid:
                found.append("pgid")
            if sid is not None and st.sid == sid:
                found.append("sid")
        entries = read_environ_entries(candidate)
        readable = entries is not None
        has_marker = entries is not None and marker in entries
        if has_marker:
            found.append("marker")
        if not has_marker and entries is None:
            unreadable.append(candidate)
        if not found:
            continue
        if not has_marker and start_time is not None and st.start_time < start_time:
            # A recycled pgid/sid: it started before the server, so it is not one of ours.
            notes.append(
                f"pid {candidate} matches {'/'.join(found)} but started before the server:"
                " not a member"
            )
            continue
        info = proc_info(st)
        info["found_by"] = found
        info["environ_readable"] = readable
        if "pid" in found:
            info["role"] = "server"
        elif st.comm == SUPERVISOR_COMM and has_marker:
            info["role"] = "supervisor"
        else:
            info["role"] = "process"
        members.append(info)
    if unreadable:
        notes.append(
            f"environ unreadable for {len(unreadable)} processes (permission or exiting):"
            " marker not checked"
        )
    return {"members": members, "unreadable_environ": unreadable[:100], "notes": notes}


# --------------------------------------------------------------------------- signals


def _pidfd_signal(pid: int, start_time: int, sig: int) -> str | None:
    """Signal pid if it is still the process that started at start_time; None, or why not."""
    pidfd_open = getattr(os, "pidfd_open", None)
    send = getattr(signal, "pidfd_send_signal", None)
    fd = -1
    if pidfd_open is not None and send is not None:
        try:
            fd = pidfd_open(pid)
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                return "gone"
            fd = -1
    try:
        # With a pidfd held the start time check cannot race with pid reuse.
        st = read_stat(pid)
        if st is None:
            return "gone"
        if st.start_time != start_time:
            return "start_time changed (pid reused)"
        try:
            if fd >= 0 and send is not None:
                send(fd, sig)
            else:
                os.kill(pid, sig)
        except ProcessLookupError:
            return "gone"
        except PermissionError:
            return "permission denied"
        return None
    finally:
        if fd >= 0:
            os.close(fd)


def signal_process(pid: int, start_time: int, sig: int) -> str | None:
    if pid in protected_pids():
        return "protected (the agent, its parents or init)"
    return _pidfd_signal(pid, start_time, sig)


def parse_signal(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        name = value.upper()
        if name.isdigit():
            return int(name)
        if not name.startswith("SIG"):
            name = "SIG" + name
        sig = getattr(signal, name, None)
        if isinstance(sig, signal.Signals):
            return int(sig)
    raise AgentError(f"unknown signal: {value!r}")


# --------------------------------------------------------------------------- ports


def _proc_net_tcp(port: int) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10:
                continue
            local_port = int(cols[1].rsplit(":", 1)[1], 16)
            if local_port == port:
                entries.append({"state": cols[3], "inode": int(cols[9])})
    return entries


def _bound_inactive_inodes(port: int) -> set[int]:
    """Inodes of sockets bound to port but neither listening nor connected (sock_diag).

    /proc/net/tcp does not show them; Linux 6.9+ dumps them as TCP_BOUND_INACTIVE (13).
    Older kernels ignore the state bit and this returns nothing.
    """
    inodes: set[int] = set()
    states = (1 << 13) | (1 << 7)
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            nl = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4)  # NETLINK_SOCK_DIAG
        except (OSError, AttributeError):
            return inodes
        try:
            nl.settimeout(2.0)
            req = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, states) + b"\0" * 48
            hdr = struct.pack("=IHHII", 16 + len(req), 20, 0x301, 1, 0)  # SOCK_DIAG_BY_FAMILY
            nl.send(hdr + req)
            done = False
            while not done:
                data = nl.recv(65536)
                offset = 0
                while offset + 16 <= len(data):
                    length, msg_type = struct.unpack_from("=IH", data, offset)
                    if length < 16 or msg_type in (2, 3):  # NLMSG_ERROR, NLMSG_DONE
                        done = True
                        break
                    body = offset + 16
                    sport = struct.unpack_from("!H", data, body + 4)[0]
                    inode = struct.unpack_from("=I", data, body + 68)[0]
                    if sport == port and inode:
                        inodes.add(inode)
                    offset += (length + 3) & ~3
        except OSError:
            pass
        finally:
            nl.close()
    return inodes


def _socket_owners(inodes: set[int]) -> list[dict[str, Any]]:
    if not inodes:
        return []
    wanted = {f"socket:[{inode}]" for inode in inodes}
    owners: list[dict[str, Any]] = []
    for pid in list_pids():
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target in wanted:
                st = read_stat(pid)
                if st is not None:
                    owners.append(proc_info(st))
                break
    return owners


def _try_bind(family: int, addr: str, port: int, reuse: bool) -> int | None:
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1 if reuse else 0)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind((addr, port))
    except OSError as exc:
        if exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            return None
        return exc.errno or -1
    finally:
        sock.close()
    return None


_TCP_STATE_NAMES = {
    "01": "ESTABLISHED",
    "04": "FIN_WAIT1",
    "05": "FIN_WAIT2",
    "06": "TIME_WAIT",
    "08": "CLOSE_WAIT",
    "09": "LAST_ACK",
    "0B": "CLOSING",
}


def port_state(port: int) -> dict[str, Any]:
    """Whether port is free: nothing listening on it and we can bind it without SO_REUSEADDR."""
    entries = _proc_net_tcp(port)
    listening = any(e["state"] == "0A" for e in entries)
    notes: list[str] = []
    bind_errors: dict[str, str] = {}
    in_use = False
    for family, addr in (
        (socket.AF_INET, "0.0.0.0"),  # noqa: S104 - a test bind, closed at once
        (socket.AF_INET, "127.0.0.1"),
        (socket.AF_INET6, "::"),
    ):
        err = _try_bind(family, addr, port, reuse=False)
        if err is not None:
            bind_errors[addr] = os.strerror(err) if err > 0 else "bind failed"
            in_use = in_use or err == errno.EADDRINUSE
    inodes = {e["inode"] for e in entries if e["inode"] and e["state"] != "06"}
    if in_use or listening:
        inodes |= _bound_inactive_inodes(port)
    holders = _socket_owners(inodes) if (in_use or listening) else []
    free = not listening and not bind_errors
    if in_use and not listening and not holders:
        # Connections no process owns any more (inode 0: TIME_WAIT, or FIN_WAIT2 while a client
        # such as a load generator or a metrics scraper keeps its end of a kept-alive connection
        # open after the server died) block a plain bind, but servers set SO_REUSEADDR and bind
        # anyway: the kernel ends them by itself, nothing is left to stop.
        only_orphans = bool(entries) and all(e["state"] == "06" or not e["inode"] for e in entries)
        any_addr = "0.0.0.0"  # noqa: S104 - a test bind, closed at once
        if only_orphans and _try_bind(socket.AF_INET, any_addr, port, reuse=True) is None:
            states = sorted({_TCP_STATE_NAMES.get(e["state"], e["state"]) for e in entries})
            notes.append(
                f"only connections no process owns ({', '.join(states)}) on the port: "
                "bindable with SO_REUSEADDR"
            )
            bind_errors = {}
            free = True
            in_use = False
        else:
            notes.append("port is bound by a process the scan cannot name")
    return {
        "port": port,
        "free": free,
        "listening": listening,
        "in_use": in_use,
        "holders": holders,
        "bind_errors": bind_errors,
        "notes": notes,
    }


def port_is_listening(port: int) -> bool:
    return any(e["state"] == "0A" for e in _proc_net_tcp(port))


# --------------------------------------------------------------------------- GPUs


def _mib(value: str) -> int | None:
    try:
        return int(float(value.strip()))
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def nvidia_smi_memory() -> dict[str, Any]:
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
    devices: list[dict[str, Any]] = []
    for line in proc.stdout.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) < 3 or not cols[0].isdigit():
            continue
        devices.append({"index": int(cols[0]), "used_mb": _mib(cols[1]), "total_mb": _mib(cols[2])})
    return {"available": True, "error": None, "devices": devices}


def gpu_holders(
    gpus: list[int] | None = None, device_dirs: list[str] | None = None
) -> list[dict[str, Any]]:
    """Processes with an open fd on */dev/nvidia<N> (or nvidiactl/nvidia-uvm: all GPUs).

    device_dirs limits the scan to device files in those directories (["/dev"] for real GPUs,
    a simulator's "<state-dir>/dev" for simulated ones); None accepts them anywhere.
    """
    skip = {os.getpid()}
    prefixes = [d.rstrip("/") + "/" for d in device_dirs] if device_dirs else None
    holders: list[dict[str, Any]] = []
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
        info = proc_info(st)
        info["gpus"] = sorted(indices)
        info["all_gpus"] = shared
        info["devices"] = sorted(devices)
        holders.append(info)
    return holders


# --------------------------------------------------------------------------- files


def write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    # O_EXCL|O_NOFOLLOW: never write through a name someone else put there first.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with open(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def expand_run_dir(path: str) -> str:
    """``{uid}`` in a run directory is this user's uid: one private run root per user."""
    return path.replace("{uid}", str(os.getuid()))


def _trusted_ancestors(path: str) -> None:
    # Above the run root, every directory must belong to root or to us, and one others may
    # write to must be sticky (as /tmp is): otherwise they could swap the root out.
    uid = os.getuid()
    current = os.path.realpath(path)
    while True:
        st = os.stat(current)
        if st.st_uid not in (0, uid):
            raise AgentError(
                f"unsafe run directory: {current} belongs to uid {st.st_uid}, not to root or"
                f" this user (uid {uid}); set SPECDASH_RUN_ROOT to a private directory"
            )
        if st.st_mode & 0o022 and not st.st_mode & 0o1000:
            raise AgentError(
                f"unsafe run directory: {current} is writable by others and not sticky;"
                " set SPECDASH_RUN_ROOT to a private directory"
            )
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


def private_dir(path: str) -> None:
    """Create ``path`` 0700, or accept an existing one only if it is a real directory (not a
    symlink) owned by this user that nobody else can write to; refuse anything else."""
    import stat

    uid = os.getuid()
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise AgentError(f"unsafe run directory: {path} is a symlink; remove it or choose another")
    if not stat.S_ISDIR(st.st_mode):
        raise AgentError(f"unsafe run directory: {path} is not a directory")
    if st.st_uid != uid:
        raise AgentError(
            f"unsafe run directory: {path} belongs to uid {st.st_uid}, not this user"
            f" (uid {uid}); another user may have created it: remove it or set"
            " SPECDASH_RUN_ROOT to a private directory"
        )
    if st.st_mode & 0o022:
        raise AgentError(
            f"unsafe run directory: {path} is writable by group or others (mode"
            f" {stat.S_IMODE(st.st_mode):o}); remove it or make it 0700"
        )
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)  # ours and unwritable by others: safe to tighten


def private_run_dir(run_dir: str) -> None:
    """The run root (``run_dir``'s parent) and ``run_dir`` itself, both private."""
    root = os.path.dirname(run_dir.rstrip("/"))
    _trusted_ancestors(os.path.dirname(root))
    private_dir(root)
    private_dir(run_dir)


def read_exit_code(run_dir: str | None) -> int | None:
    if not run_dir:
        return None
    try:
        with open(os.path.join(run_dir, "exit_code")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def log_tail(path: str, lines: int, max_bytes: int) -> dict[str, Any]:
    lines = max(0, min(lines, 10000))
    max_bytes = max(1, min(max_bytes, 1 << 20))
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            f.seek(max(0, size - max_bytes))
            data = f.read(max_bytes)
    except OSError:
        return {"path": path, "exists": False, "size": 0, "lines": [], "truncated": False}
    truncated = size > max_bytes
    text = data.decode("utf-8", "replace").splitlines()
    if truncated and text:
        text = text[1:]  # the first line is probably cut
    out = text[-lines:] if lines else []
    return {
        "path": path,
        "exists": True,
        "size": size,
        "lines": out,
        "truncated": truncated or len(text) > len(out),
    }


# --------------------------------------------------------------------------- arguments


def _opt_int(args: dict[str, Any], key: str, default: int | None = None) -> int | None:
    value = args.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AgentError(f"{key} must be a number")
    return int(value)


def _req_int(args: dict[str, Any], key: str) -> int:
    value = _opt_int(args, key)
    if value is None:
        raise AgentError(f"{key} is required")
    return value


def _opt_float(args: dict[str, Any], key: str, default: float) -> float:
    value = args.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AgentError(f"{key} must be a number")
    return float(value)


def _opt_str(args: dict[str, Any], key: str) -> str | None:
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise AgentError(f"{key} must be a string")
    return value


def _req_str(args: dict[str, Any], key: str) -> str:
    value = _opt_str(args, key)
    if not value:
        raise AgentError(f"{key} is required")
    return value


def _opt_run_dir(args: dict[str, Any]) -> str | None:
    value = _opt_str(args, "run_dir")
    return expand_run_dir(value) if value else value


def _run_id(args: dict[str, Any]) -> str:
    run_id = _req_str(args, "run_id")
    if RUN_ID_RE.match(run_id) is None:
        raise AgentError("run_id must be 1-128 characters of [A-Za-z0-9._:@+-]")
    return run_id


def _int_list(args: dict[str, Any], key: str) -> list[int]:
    value = args.get(key) or []
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise AgentError(f"{key} must be a list of integers")
    return list(value)


def _str_list(args: dict[str, Any], key: str) -> list[str] | None:
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AgentError(f"{key} must be a list of strings")
    return list(value)


def _identity(args: dict[str, Any]) -> dict[str, Any]:
    ident = {
        "run_id": _run_id(args),
        "pid": _opt_int(args, "pid"),
        "pgid": _opt_int(args, "pgid"),
        "sid": _opt_int(args, "sid"),
        "start_time": _opt_int(args, "start_time"),
    }
    boot_id = _opt_str(args, "boot_id")
    if boot_id and boot_id != read_boot_id():
        # The host rebooted since the launch: recorded ids mean nothing, only the marker does.
        ident.update(pid=None, pgid=None, sid=None, start_time=None)
    return ident


# --------------------------------------------------------------------------- commands


def cmd_preflight(args: dict[str, Any]) -> dict[str, Any]:
    problems: list[str] = []
    result: dict[str, Any] = {}
    port = _opt_int(args, "port")
    if port is not None:
        ps = port_state(port)
        result["port"] = ps
        if ps["listening"] or ps["in_use"]:
            who = ", ".join(f"pid {h['pid']} ({h['comm']})" for h in ps["holders"])
            problems.append(
                f"port {port} is taken"
                f" ({'listening' if ps['listening'] else 'bound, not listening'}):"
                f" {who or 'holder unknown'}"
            )
        elif not ps["free"]:
            errors = "; ".join(ps["bind_errors"].values())
            problems.append(f"port {port} cannot be bound: {errors}")
    gpus = _int_list(args, "gpus")
    threshold = _opt_int(args, "gpu_mem_threshold_mb", 1024)
    if gpus:
        mem = nvidia_smi_memory()
        by_index = {d["index"]: d for d in mem["devices"]}
        for dev in mem["devices"]:
            used = dev["used_mb"]
            dev["held"] = used is not None and threshold is not None and used > threshold
        if mem["available"]:
            for index in gpus:
                dev = by_index.get(index)
                if dev is None:
                    problems.append(f"GPU {index} not found by nvidia-smi")
                elif dev["held"]:
                    problems.append(
                        f"GPU {index} is in use: {dev['used_mb']} MiB used"
                        f" (threshold {threshold} MiB)"
                    )
        mem["holders"] = gpu_holders(gpus, _str_list(args, "device_dirs"))
        result["gpus"] = mem
    binary = _opt_str(args, "binary")
    if binary is not None:
        if os.path.isabs(binary):
            found = os.path.isfile(binary) and os.access(binary, os.X_OK)
            path: str | None = binary if found else None
        else:
            path = shutil.which(binary)
            found = path is not None
        result["binary"] = {"name": binary, "path": path, "found": found}
        if not found:
            problems.append(f"binary not found or not executable: {binary}")
    workdir = _opt_str(args, "workdir")
    if workdir is not None:
        exists = os.path.isdir(workdir)
        result["workdir"] = {"path": workdir, "exists": exists}
        if not exists:
            problems.append(f"workdir does not exist: {workdir}")
    result["problems"] = problems
    result["ok"] = not problems
    return result


_SUPERVISOR_SOURCE = r"""
import json, os, signal, subprocess, sys, time

def log(msg):
    sys.stdout.write("[specdash-supervisor %s] %s\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), msg))
    sys.stdout.flush()

def write_atomic(path, text):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)

def start_time_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])

def child_setup():
    os.setpgid(0, 0)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)

def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    report = int(sys.argv[2])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        libc.prctl(15, b"specdash-sup", 0, 0, 0)  # PR_SET_NAME
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: orphans stay with us, get reaped
    except Exception:
        pass
    run_dir = spec["run_dir"]
    try:
        proc = subprocess.Popen(
            spec["argv"], cwd=spec["workdir"] or None, stdin=subprocess.DEVNULL,
            close_fds=True, preexec_fn=child_setup,
        )
    except OSError as exc:
        code = 126 if isinstance(exc, PermissionError) else 127
        log("could not start %r: %s" % (spec["argv"], exc))
        write_atomic(os.path.join(run_dir, "exit_code"), "%d\n" % code)
        os.write(report, (json.dumps({"error": "could not start the server: %s" % exc,
                                      "exit_code": code}) + "\n").encode())
        return
    info = {
        "run_id": spec["run_id"], "pid": proc.pid, "supervisor_pid": os.getpid(),
        "pgid": proc.pid, "sid": os.getsid(0), "start_time": start_time_of(proc.pid),
        "boot_id": spec["boot_id"], "cmdline": spec["argv"], "port": spec["port"],
        "log_path": os.path.join(run_dir, "server.log"), "run_dir": run_dir,
    }
    write_atomic(os.path.join(run_dir, "server.json"), json.dumps(info) + "\n")
    log("started pid %d: %s" % (proc.pid, " ".join(spec["argv"])))
    os.write(report, (json.dumps(info) + "\n").encode())
    os.close(report)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        if pid == proc.pid:
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            proc.returncode = code
            write_atomic(os.path.join(run_dir, "exit_code"), "%d\n" % code)
            log("server pid %d exited with code %d" % (pid, code))

main()
"""


def _server_info(run_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(run_dir, "server.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def _spawn_supervisor(spec: dict[str, Any], env: dict[str, str], log_path: str) -> int:
    """Double fork + setsid, std streams redirected, then exec the supervisor.

    Returns the read end of a pipe on which the supervisor reports the server's identity.
    """
    run_dir = spec["run_dir"]
    script = os.path.join(run_dir, "supervisor.py")
    spec_path = os.path.join(run_dir, "launch.json")
    write_atomic(script, _SUPERVISOR_SOURCE)
    write_atomic(spec_path, json.dumps(spec) + "\n")
    read_fd, write_fd = os.pipe()
    python = sys.executable or shutil.which("python3") or "python3"
    argv = [python, "-I", script, spec_path, str(write_fd)]
    first = os.fork()
    if first == 0:  # intermediate: new session, fork the supervisor, leave
        try:
            os.setsid()
            if os.fork() != 0:
                os._exit(0)
            os.close(read_fd)
            null = os.open(os.devnull, os.O_RDONLY)
            out = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            os.dup2(null, 0)
            os.dup2(out, 1)
            os.dup2(out, 2)
            # Nothing inherited may keep the controlling ssh/pct channel open.
            os.closerange(3, write_fd)
            os.closerange(write_fd + 1, _max_fd())
            os.set_inheritable(write_fd, True)
            os.chdir(run_dir)
            os.execve(python, argv, env)  # noqa: S606 - argv, no shell
        except BaseException as exc:  # whatever happens, this fork must not return
            try:
                os.write(write_fd, (json.dumps({"error": f"supervisor: {exc}"}) + "\n").encode())
            finally:
                os._exit(127)
    os.close(write_fd)
    os.waitpid(first, 0)
    return read_fd


def _max_fd() -> int:
    try:
        return min(os.sysconf("SC_OPEN_MAX"), 65536)
    except (OSError, ValueError):
        return 1024


def _read_report(fd: int, timeout: float) -> dict[str, Any]:
    import select

    data = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentError(f"the supervisor did not report within {timeout:.0f} s")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if not data.strip():
        return {"error": "the supervisor exited without reporting"}
    report = json.loads(data.decode().splitlines()[0])
    if not isinstance(report, dict):
        raise AgentError("bad supervisor report")
    return report


def cmd_launch(args: dict[str, Any]) -> dict[str, Any]:
    run_id = _run_id(args)
    argv = args.get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        raise AgentError("argv must be a non-empty list of strings")
    env_arg = args.get("env") or {}
    if not isinstance(env_arg, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env_arg.items()
    ):
        raise AgentError("env must map strings to strings")
    run_dir = expand_run_dir(_req_str(args, "run_dir"))
    if not os.path.isabs(run_dir) or ".." in run_dir.split("/"):
        raise AgentError("run_dir must be an absolute path without '..'")
    workdir = _opt_str(args, "workdir")
    if workdir is not None and not os.path.isdir(workdir):
        raise AgentError(f"workdir does not exist: {workdir}")
    port = _opt_int(args, "port")
    # supervisor.py and launch.json are written here and then run: nobody else may own, be
    # able to write to, or redirect (symlink) the run root or the run directory.
    private_run_dir(run_dir)
    # Two launches of one run (a retry racing the original) must not both get past the check.
    lock_fd = os.open(
        os.path.join(run_dir, ".launch.lock"), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600
    )
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        return _launch_locked(run_id, argv, env_arg, workdir, run_dir, port)
    finally:
        os.close(lock_fd)


def _launch_locked(
    run_id: str,
    argv: list[str],
    env_arg: dict[str, str],
    workdir: str | None,
    run_dir: str,
    port: int | None,
) -> dict[str, Any]:
    live = [m for m in find_members(run_id)["members"] if m["state"] not in ("Z", "X")]
    if live:
        info = _server_info(run_dir)
        if info is not None and is_alive(int(info["pid"]), int(info["start_time"])):
            info.update(ok=True, already_running=True, members=live)
            return info
        raise AgentError(
            f"run {run_id} still has {len(live)} live processes but no running server:"
            f" stop it first (pids {', '.join(str(m['pid']) for m in live)})"
        )

    for stale in ("exit_code", "server.json"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(run_dir, stale))
    log_path = os.path.join(run_dir, "server.log")
    env = dict(os.environ)
    env.update(env_arg)
    env[MARKER_VAR] = run_id
    env["SPT_NOENV"] = "1"  # keeps setproctitle from overwriting /proc/<pid>/environ
    spec = {
        "run_id": run_id,
        "argv": argv,
        "workdir": workdir,
        "run_dir": run_dir,
        "port": port,
        "boot_id": read_boot_id(),
    }
    report = _read_report(_spawn_supervisor(spec, env, log_path), timeout=30.0)
    if "error" in report:
        tail = log_tail(log_path, 20, 8192)["lines"]
        return {
            "ok": False,
            "error": report["error"],
            "exit_code": report.get("exit_code"),
            "log_path": log_path,
            "log_tail": tail,
        }
    report.update(ok=True, already_running=False)
    return report


def cmd_members(args: dict[str, Any]) -> dict[str, Any]:
    result = find_members(**_identity(args))
    result["ok"] = True
    return result


def cmd_status(args: dict[str, Any]) -> dict[str, Any]:
    ident = _identity(args)
    pid = _req_int(args, "pid")
    start_time = _req_int(args, "start_time")
    st = read_stat(pid) if ident["pid"] is not None else None
    same = st is not None and st.start_time == start_time
    alive = same and st is not None and st.state not in ("Z", "X")
    if same and st is not None:
        ident["pgid"] = ident["pgid"] if ident["pgid"] is not None else st.pgid
        ident["sid"] = ident["sid"] if ident["sid"] is not None else st.sid
    run_dir = _opt_run_dir(args)
    port = _opt_int(args, "port")
    lines = _opt_int(args, "log_lines", 50) or 0
    found = find_members(**ident)
    return {
        "ok": True,
        "alive": alive,
        "state": st.state if same and st is not None else None,
        "exit_code": read_exit_code(run_dir),
        "members": found["members"],
        "notes": found["notes"],
        "port": (
            {"port": port, "listening": port_is_listening(port)} if port is not None else None
        ),
        "log": (log_tail(os.path.join(run_dir, "server.log"), lines, 65536) if run_dir else None),
    }


def _live(member: dict[str, Any]) -> bool:
    return member["state"] not in ("Z", "X")


def cmd_stop(args: dict[str, Any]) -> dict[str, Any]:
    ident = _identity(args)
    grace = _opt_float(args, "grace_seconds", 10.0)
    kill_wait = _opt_float(args, "kill_wait_seconds", 5.0)
    supervisor_pid = _opt_int(args, "supervisor_pid")
    run_dir = _opt_run_dir(args)
    started = time.monotonic()
    termed: dict[int, int] = {}  # pid -> start_time
    killed: dict[int, int] = {}
    skipped: list[dict[str, Any]] = []

    def scan() -> list[dict[str, Any]]:
        return [m for m in find_members(**ident)["members"] if _live(m)]

    def send(member: dict[str, Any], sig: int, book: dict[int, int]) -> None:
        pid, st = int(member["pid"]), int(member["start_time"])
        if book.get(pid) == st:
            return
        why = signal_process(pid, st, sig)
        if why is None:
            book[pid] = st
        elif why != "gone":
            skipped.append({"pid": pid, "reason": why})

    def is_supervisor(member: dict[str, Any]) -> bool:
        return bool(member["role"] == "supervisor" or member["pid"] == supervisor_pid)

    # SIGTERM everything, re-scanning so workers forked meanwhile get it too. The supervisor
    # ignores it and leaves by itself once the server is reaped (after writing exit_code).
    deadline = started + grace
    while True:
        live = scan()
        for member in live:
            send(member, signal.SIGTERM, termed)
        if not live or time.monotonic() >= deadline:
            break
        time.sleep(POLL_SECONDS)

    # SIGKILL what remains; the supervisor last, so it can still record the exit code.
    deadline = time.monotonic() + kill_wait
    others_gone_at: float | None = None
    while True:
        live = scan()
        if not live:
            break
        others = [m for m in live if not is_supervisor(m)]
        for member in others:
            send(member, signal.SIGKILL, killed)
        now = time.monotonic()
        if not others:
            others_gone_at = others_gone_at if others_gone_at is not None else now
            if now - others_gone_at > 2.0 or now >= deadline - 0.5:
                for member in live:
                    send(member, signal.SIGKILL, killed)
        if now >= deadline:
            break
        time.sleep(POLL_SECONDS)

    final = find_members(**ident)["members"]
    alive_now = {(int(m["pid"]), int(m["start_time"])) for m in final if _live(m)}
    exit_code = read_exit_code(run_dir)
    if run_dir and exit_code is None and ident["pid"] is not None and not alive_now:
        time.sleep(0.3)  # the supervisor may be writing it right now
        exit_code = read_exit_code(run_dir)
    survivors = sorted(pid for pid, _ in alive_now)
    return {
        "ok": True,
        "clean": not survivors,
        "terminated": sorted(
            p for p, s in termed.items() if p not in killed and (p, s) not in alive_now
        ),
        "killed": sorted(p for p, s in killed.items() if (p, s) not in alive_now),
        "survivors": survivors,
        "zombies": sorted(int(m["pid"]) for m in final if m["state"] == "Z"),
        "d_state": sorted(int(m["pid"]) for m in final if m["state"] == "D"),
        "skipped": skipped,
        "exit_code": exit_code,
        "duration": round(time.monotonic() - started, 3),
    }


def cmd_verify(args: dict[str, Any]) -> dict[str, Any]:
    ident = _identity(args)
    port = _opt_int(args, "port")
    gpus = _int_list(args, "gpus")
    tolerance = _opt_int(args, "tolerance_mb", 512) or 0
    baseline_arg = args.get("baseline_gpu_mem_mb") or {}
    if not isinstance(baseline_arg, dict):
        raise AgentError("baseline_gpu_mem_mb must map GPU index to MiB")
    baseline = {int(k): int(v) for k, v in baseline_arg.items()}
    reasons: list[str] = []

    members = find_members(**ident)["members"]
    live = [m for m in members if _live(m)]
    if live:
        reasons.append(
            f"{len(live)} processes of the run are still alive: "
            + ", ".join(f"{m['pid']} ({m['comm']}, {m['state']})" for m in live)
        )
    port_result: dict[str, Any] | None = None
    if port is not None:
        port_result = port_state(port)
        if not port_result["free"]:
            reasons.append(
                f"port {port} is still {'listening' if port_result['listening'] else 'bound'}"
            )

    gpu_memory: Any = "unknown"
    holders: list[dict[str, Any]] = []
    if gpus:
        mem = nvidia_smi_memory()
        if mem["available"]:
            by_index = {d["index"]: d for d in mem["devices"]}
            gpu_memory = {}
            for index in gpus:
                dev = by_index.get(index)
                used = dev["used_mb"] if dev is not None else None
                base = baseline.get(index)
                # Without a reading or a level from before the start nothing was compared:
                # null, not a pass.
                ok = None if used is None or base is None else used <= base + tolerance
                gpu_memory[str(index)] = {"used_mb": used, "baseline_mb": base, "ok": ok}
                if ok is False:
                    reasons.append(
                        f"GPU {index} memory not released: {used} MiB used,"
                        f" baseline {base} MiB (+{tolerance})"
                    )
        member_pids = {int(m["pid"]) for m in members}
        for holder in gpu_holders(gpus, _str_list(args, "device_dirs")):
            counts = bool(set(holder["gpus"]).intersection(gpus)) or holder["pid"] in member_pids
            holder["counts"] = counts
            holders.append(holder)
            if counts:
                reasons.append(
                    f"pid {holder['pid']} ({holder['comm']}) holds " + ", ".join(holder["devices"])
                )
    return {
        "ok": True,
        "verdict": "dirty" if reasons else "stopped",
        "reasons": reasons,
        "members": members,
        "port": port_result,
        "gpu_memory": gpu_memory,
        "holders": holders,
    }


def cmd_kill_pids(args: dict[str, Any]) -> dict[str, Any]:
    entries = args.get("pids")
    if not isinstance(entries, list):
        raise AgentError("pids must be a list of {pid, start_time}")
    sig = parse_signal(args.get("signal", "KILL"))
    wait = _opt_float(args, "wait_seconds", 0.0)
    signalled: list[int] = []
    skipped: list[dict[str, Any]] = []
    targets: list[tuple[int, int]] = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise AgentError("pids must be a list of {pid, start_time}")
        pid = _req_int(entry, "pid")
        start_time = _req_int(entry, "start_time")
        why = signal_process(pid, start_time, sig)
        if why is None:
            signalled.append(pid)
            targets.append((pid, start_time))
        else:
            skipped.append({"pid": pid, "reason": why})
    deadline = time.monotonic() + wait
    while wait > 0 and time.monotonic() < deadline:
        if not any(is_alive(p, s) for p, s in targets):
            break
        time.sleep(POLL_SECONDS)
    alive = [p for p, s in targets if is_alive(p, s)]
    return {
        "ok": True,
        "signal": sig,
        "signalled": signalled,
        "skipped": skipped,
        "exited": [p for p, _ in targets if p not in alive],
        "alive": alive,
    }


def cmd_log_tail(args: dict[str, Any]) -> dict[str, Any]:
    run_dir = expand_run_dir(_req_str(args, "run_dir"))
    result = log_tail(
        os.path.join(run_dir, "server.log"),
        _opt_int(args, "lines", 50) or 0,
        _opt_int(args, "max_bytes", 65536) or 65536,
    )
    result["ok"] = True
    return result


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


def _driver_versions(exe: str) -> dict[str, Any]:
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


def _file_record(path: str) -> dict[str, Any]:
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
    record: dict[str, Any] = {"path": path, "kind": "file", "size": st.st_size,
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


def cmd_probe(args: dict[str, Any]) -> dict[str, Any]:
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
    nvidia: dict[str, Any] = {"available": False, "gpus": [], "error": None}
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
                nvidia.update(_driver_versions(exe))
                nvidia["details"] = _gpu_details(exe)
        except (OSError, subprocess.TimeoutExpired) as exc:
            nvidia["error"] = str(exc)
    engines: dict[str, Any] = {}
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


COMMANDS = {
    "preflight": cmd_preflight,
    "launch": cmd_launch,
    "status": cmd_status,
    "members": cmd_members,
    "stop": cmd_stop,
    "verify": cmd_verify,
    "kill_pids": cmd_kill_pids,
    "log_tail": cmd_log_tail,
    "probe": cmd_probe,
}
MUTATING = ("launch", "stop", "kill_pids")


CONTROLLER_LOG_MAX_BYTES = 1 << 20


class Superseded(AgentError):
    """A call from a controller that another one took over from."""


def run_command(argv: list[str]) -> dict[str, Any]:
    if not argv:
        raise AgentError("usage: python3 - <command> '<json>' ({})".format(", ".join(COMMANDS)))
    handler = COMMANDS.get(argv[0])
    if handler is None:
        raise AgentError("unknown command {!r} (known: {})".format(argv[0], ", ".join(COMMANDS)))
    try:
        args = json.loads(argv[1]) if len(argv) > 1 and argv[1].strip() else {}
    except ValueError as exc:
        raise AgentError(f"arguments are not valid JSON: {exc}") from None
    if not isinstance(args, dict):
        raise AgentError("arguments must be a JSON object")
    if argv[0] in MUTATING:
        # A dropped ssh/pct connection must not cut a launch or stop in half.
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    controller, run_dir = args.get("controller"), args.get("run_dir")
    if isinstance(controller, int) and isinstance(run_dir, str) and run_dir:
        with _fenced(run_dir, controller, argv[0]):
            return handler(args)
    return handler(args)


@contextlib.contextmanager
def _fenced(run_dir: str, controller: int, command: str) -> Any:
    """One controller at a time per run: the lock is held for the whole command, so a call
    from a job that was taken over either finished before the new one's first call or is
    refused."""
    run_dir = expand_run_dir(run_dir)
    if not os.path.isabs(run_dir) or ".." in run_dir.split("/"):
        raise AgentError("run_dir must be an absolute path without '..'")
    # The same private run directory launch uses: the lock and the log are written there.
    private_run_dir(run_dir)
    lock_fd = os.open(
        os.path.join(run_dir, "controller.lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600
    )
    with open(lock_fd, "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        path = os.path.join(run_dir, "controller")
        try:
            with open(path) as f:
                highest = int(f.read().strip() or 0)
        except (OSError, ValueError):
            highest = 0
        accepted = controller >= highest
        log_path = os.path.join(run_dir, "controllers.log")
        with contextlib.suppress(OSError):
            # A server watched for days is asked every second: keep the last one or two MiB.
            if os.path.getsize(log_path) > CONTROLLER_LOG_MAX_BYTES:
                os.replace(log_path, log_path + ".1")
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
        with open(log_fd, "a") as log:
            entry = {"t": time.time(), "controller": controller, "command": command,
                     "accepted": accepted}  # fmt: skip
            log.write(json.dumps(entry) + "\n")
        if not accepted:
            raise Superseded(f"superseded: job {highest} now controls this run, not {controller}")
        if controller > highest:
            write_atomic(path, f"{controller}\n")
        yield


def main(argv: list[str]) -> int:
    sys.stdout.write(BEGIN_MARKER + "\n")
    sys.stdout.flush()
    try:
        result = run_command(argv)
        result = {"ok": result.pop("ok", True), **result}
    except Superseded as exc:
        result = {"ok": False, "error": str(exc), "superseded": True}
    except AgentError as exc:
        result = {"ok": False, "error": str(exc)}
    except Exception as exc:
        result = {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc()[-4000:],
        }
    try:
        line = json.dumps(result, default=str)
    except (TypeError, ValueError) as exc:
        line = json.dumps({"ok": False, "error": f"unserialisable result: {exc}"})
    try:
        sys.stdout.write(f"{RESULT_MARKER} {line}\n")
        sys.stdout.flush()
    except OSError:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
