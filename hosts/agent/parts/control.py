"""members, status, stop, verify, kill_pids and log_tail of a launched run."""

from __future__ import annotations

import os
import signal
import time
from typing import Literal, TypedDict

from hosts.agent.parts.arguments import (
    Identity,
    _identity,
    _int_list,
    _opt_float,
    _opt_int,
    _opt_run_dir,
    _req_int,
    _req_str,
    _str_list,
)
from hosts.agent.parts.base import POLL_SECONDS, AgentError
from hosts.agent.parts.files import LogTail, expand_run_dir, log_tail, read_exit_code
from hosts.agent.parts.gpus import GpuHolder, gpu_holders, nvidia_smi_memory
from hosts.agent.parts.ports import PortState, port_is_listening, port_state
from hosts.agent.parts.procfs import (
    Member,
    Members,
    find_members,
    is_alive,
    parse_signal,
    read_stat,
    signal_process,
)

# The answers of these commands, as the controller reads them (hosts.lifecycle): declared here,
# where they are produced, so that both sides are checked against one declaration.


class MembersAnswer(Members):
    ok: bool


class PortListening(TypedDict):
    port: int
    listening: bool


class StatusAnswer(TypedDict):
    ok: bool
    alive: bool
    state: str | None
    exit_code: int | None
    members: list[Member]
    notes: list[str]
    port: PortListening | None
    log: LogTail | None


class Skipped(TypedDict):
    """A process not signalled, and why ("permission denied", "start_time changed ...")."""

    pid: int
    reason: str


class StopAnswer(TypedDict):
    ok: bool
    clean: bool
    terminated: list[int]
    killed: list[int]
    # Found by a scan, gone before their signal: ended by themselves meanwhile (a worker that
    # leaves when its parent exits). Counted, so every member the stop found is accounted for.
    exited: list[int]
    survivors: list[int]
    zombies: list[int]
    d_state: list[int]
    skipped: list[Skipped]
    exit_code: int | None
    duration: float


class GpuMemoryCheck(TypedDict):
    """One GPU's memory after a stop against its level before the start (ok None: either
    reading is missing, so nothing was compared)."""

    used_mb: int | None
    baseline_mb: int | None
    ok: bool | None


class CountedHolder(GpuHolder):
    counts: bool  # holds one of the run's GPUs, or is one of its members


class VerifyAnswer(TypedDict):
    ok: bool
    verdict: Literal["stopped", "dirty"]
    reasons: list[str]
    members: list[Member]
    port: PortState | None
    # "unknown" when no GPUs were asked about; by GPU index (a string: JSON keys) otherwise.
    gpu_memory: dict[str, GpuMemoryCheck] | str
    holders: list[CountedHolder]


class KillPidsAnswer(TypedDict):
    ok: bool
    signal: int
    signalled: list[int]
    skipped: list[Skipped]
    exited: list[int]
    alive: list[int]


class LogTailAnswer(LogTail):
    ok: bool


def cmd_members(args: dict[str, object]) -> MembersAnswer:
    return {**find_members(**_identity(args)), "ok": True}


def cmd_status(args: dict[str, object]) -> StatusAnswer:
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
    exit_code = read_exit_code(run_dir)
    if exit_code is None and not alive and run_dir and ident["pid"] is not None:
        exit_code, found = _exit_code_from_supervisor(run_dir, ident, found)
    return {
        "ok": True,
        "alive": alive,
        "state": st.state if same and st is not None else None,
        "exit_code": exit_code,
        "members": found["members"],
        "notes": found["notes"],
        "port": (
            {"port": port, "listening": port_is_listening(port)} if port is not None else None
        ),
        "log": (log_tail(os.path.join(run_dir, "server.log"), lines, 65536) if run_dir else None),
    }


# How long a status waits for a live supervisor to record its dead server's exit code.
EXIT_CODE_WAIT_S = 2.0


def _exit_code_from_supervisor(
    run_dir: str, ident: Identity, found: Members
) -> tuple[int | None, Members]:
    """The exit code of a server that just died, once its supervisor has recorded it.

    The server is a zombie (or just reaped) until its supervisor, woken by the death, writes
    the code; on a busy host that takes a moment, and a status read in between would record
    the crash without its code (a SIGKILLed vLLM API server was marked "crashed" with none).
    So while the supervisor lives, wait for it, a bounded time; with no supervisor left,
    nobody will write the code and there is nothing to wait for."""
    deadline = time.monotonic() + EXIT_CODE_WAIT_S
    while True:
        supervisors = [m for m in found["members"] if m["role"] == "supervisor" and _live(m)]
        code = read_exit_code(run_dir)
        if code is not None or not supervisors or time.monotonic() >= deadline:
            return code, found
        time.sleep(POLL_SECONDS)
        found = find_members(**ident)


def _live(member: Member) -> bool:
    return member["state"] not in ("Z", "X")


def cmd_stop(args: dict[str, object]) -> StopAnswer:
    ident = _identity(args)
    grace = _opt_float(args, "grace_seconds", 10.0)
    kill_wait = _opt_float(args, "kill_wait_seconds", 5.0)
    supervisor_pid = _opt_int(args, "supervisor_pid")
    run_dir = _opt_run_dir(args)
    started = time.monotonic()
    termed: dict[int, int] = {}  # pid -> start_time
    killed: dict[int, int] = {}
    gone: dict[int, int] = {}
    skipped: list[Skipped] = []

    def scan() -> list[Member]:
        return [m for m in find_members(**ident)["members"] if _live(m)]

    def send(member: Member, sig: int, book: dict[int, int]) -> None:
        pid, st = int(member["pid"]), int(member["start_time"])
        if book.get(pid) == st:
            return
        why = signal_process(pid, st, sig)
        if why is None:
            book[pid] = st
        elif why == "gone":
            gone[pid] = st
        else:
            skipped.append({"pid": pid, "reason": why})

    def is_supervisor(member: Member) -> bool:
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
        "exited": sorted(p for p in gone if p not in termed and p not in killed),
        "survivors": survivors,
        "zombies": sorted(int(m["pid"]) for m in final if m["state"] == "Z"),
        "d_state": sorted(int(m["pid"]) for m in final if m["state"] == "D"),
        "skipped": skipped,
        "exit_code": exit_code,
        "duration": round(time.monotonic() - started, 3),
    }


def cmd_verify(args: dict[str, object]) -> VerifyAnswer:
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
    port_result: PortState | None = None
    if port is not None:
        port_result = port_state(port)
        if not port_result["free"]:
            reasons.append(
                f"port {port} is still {'listening' if port_result['listening'] else 'bound'}"
            )

    gpu_memory: dict[str, GpuMemoryCheck] | str = "unknown"
    holders: list[CountedHolder] = []
    if gpus:
        mem = nvidia_smi_memory()
        if mem["available"]:
            by_index = {d["index"]: d for d in mem["devices"]}
            checks: dict[str, GpuMemoryCheck] = {}
            gpu_memory = checks
            for index in gpus:
                dev = by_index.get(index)
                used = dev["used_mb"] if dev is not None else None
                base = baseline.get(index)
                # Without a reading or a level from before the start nothing was compared:
                # null, not a pass.
                ok = None if used is None or base is None else used <= base + tolerance
                checks[str(index)] = {"used_mb": used, "baseline_mb": base, "ok": ok}
                if ok is False:
                    reasons.append(
                        f"GPU {index} memory not released: {used} MiB used,"
                        f" baseline {base} MiB (+{tolerance})"
                    )
        member_pids = {int(m["pid"]) for m in members}
        for holder in gpu_holders(gpus, _str_list(args, "device_dirs")):
            counts = bool(set(holder["gpus"]).intersection(gpus)) or holder["pid"] in member_pids
            holders.append({**holder, "counts": counts})
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


def cmd_kill_pids(args: dict[str, object]) -> KillPidsAnswer:
    entries = args.get("pids")
    if not isinstance(entries, list):
        raise AgentError("pids must be a list of {pid, start_time}")
    sig = parse_signal(args.get("signal", "KILL"))
    wait = _opt_float(args, "wait_seconds", 0.0)
    signalled: list[int] = []
    skipped: list[Skipped] = []
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


def cmd_log_tail(args: dict[str, object]) -> LogTailAnswer:
    run_dir = expand_run_dir(_req_str(args, "run_dir"))
    result = log_tail(
        os.path.join(run_dir, "server.log"),
        _opt_int(args, "lines", 50) or 0,
        _opt_int(args, "max_bytes", 65536) or 65536,
    )
    return {**result, "ok": True}
