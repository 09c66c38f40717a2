"""/proc readers, the members of a run (its marked processes), and signals sent by pidfd."""

from __future__ import annotations

import errno
import os
import signal
from typing import Any, NamedTuple, TypedDict

from hosts.agent.parts.base import CMDLINE_LIMIT, MARKER_VAR, SUPERVISOR_COMM, AgentError


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


class ProcInfo(TypedDict):
    """A process as the agent reports it (a run's member, a port's or a GPU's holder)."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    comm: str
    cmdline: list[str]
    start_time: int


class Member(ProcInfo):
    """A process of the run: how it was found, and its role in it."""

    found_by: list[str]
    environ_readable: bool
    role: str  # "server", "supervisor" or "process"


class Members(TypedDict):
    members: list[Member]
    unreadable_environ: list[int]
    notes: list[str]


def proc_info(st: ProcStat) -> ProcInfo:
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


def find_members(
    run_id: str,
    pid: int | None = None,
    pgid: int | None = None,
    sid: int | None = None,
    start_time: int | None = None,
) -> Members:
    """Every process of the instance: by pgid, by session, or by the environment marker."""
    marker = (f"{MARKER_VAR}={run_id}").encode()
    skip = protected_pids()
    members: list[Member] = []
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
        if "pid" in found:
            role = "server"
        elif st.comm == SUPERVISOR_COMM and has_marker:
            role = "supervisor"
        else:
            role = "process"
        info: Member = {
            **proc_info(st),
            "found_by": found,
            "environ_readable": readable,
            "role": role,
        }
        members.append(info)
    if unreadable:
        notes.append(
            f"environ unreadable for {len(unreadable)} processes (permission or exiting):"
            " marker not checked"
        )
    return {"members": members, "unreadable_environ": unreadable[:100], "notes": notes}


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
