"""preflight and launch: the detached supervisor that owns the server."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import time
from typing import TypedDict, cast

from hosts.agent.parts.arguments import _int_list, _opt_int, _opt_str, _req_str, _run_id, _str_list
from hosts.agent.parts.base import MARKER_VAR, AgentError
from hosts.agent.parts.files import expand_run_dir, log_tail, private_run_dir, write_atomic
from hosts.agent.parts.gpus import GpuMemory, gpu_holders, nvidia_smi_memory
from hosts.agent.parts.ports import PortState, port_state
from hosts.agent.parts.procfs import Member, find_members, is_alive, read_boot_id


class BinaryCheck(TypedDict):
    name: str
    path: str | None
    found: bool


class WorkdirCheck(TypedDict):
    path: str
    exists: bool


class PreflightAnswer(TypedDict, total=False):
    """What preflight checked (only what it was asked about), the problems it found (none:
    ok), or the agent's refusal of its arguments (``error``, ok false)."""

    port: PortState
    gpus: GpuMemory
    binary: BinaryCheck
    workdir: WorkdirCheck
    problems: list[str]
    ok: bool
    error: str


def cmd_preflight(args: dict[str, object]) -> PreflightAnswer:
    problems: list[str] = []
    result: PreflightAnswer = {}
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
                found_dev = by_index.get(index)
                if found_dev is None:
                    problems.append(f"GPU {index} not found by nvidia-smi")
                elif found_dev["held"]:
                    problems.append(
                        f"GPU {index} is in use: {found_dev['used_mb']} MiB used"
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


class ServerIdentity(TypedDict):
    """The started server, as the supervisor script above writes it to server.json and
    reports it on its pipe (the script is a string: these are the keys it writes)."""

    run_id: str
    pid: int
    supervisor_pid: int
    pgid: int
    sid: int
    start_time: int
    boot_id: str | None
    cmdline: list[str]
    port: int | None
    log_path: str
    run_dir: str


class _SupervisorFailure(TypedDict):
    error: str


class SupervisorError(_SupervisorFailure, total=False):
    """What the supervisor reports when the server could not be started (or what is said
    when it exited without a report: no exit code then)."""

    exit_code: int


class LaunchAnswer(ServerIdentity, total=False):
    ok: bool
    already_running: bool  # a repeated launch of the run re-attached to its server
    members: list[Member]  # with already_running: the run's live processes


class LaunchFailure(TypedDict):
    ok: bool  # false
    error: str
    exit_code: int | None
    log_path: str
    log_tail: list[str]


class LaunchSpec(TypedDict):
    """launch.json: what the supervisor starts."""

    run_id: str
    argv: list[str]
    workdir: str | None
    run_dir: str
    port: int | None
    boot_id: str | None


def _server_info(run_dir: str) -> ServerIdentity | None:
    try:
        with open(os.path.join(run_dir, "server.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return cast(ServerIdentity, info) if isinstance(info, dict) else None


def _spawn_supervisor(spec: LaunchSpec, env: dict[str, str], log_path: str) -> int:
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


def _read_report(fd: int, timeout: float) -> ServerIdentity | SupervisorError:
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
    return cast("ServerIdentity | SupervisorError", report)


def cmd_launch(args: dict[str, object]) -> LaunchAnswer | LaunchFailure:
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
) -> LaunchAnswer | LaunchFailure:
    live = [m for m in find_members(run_id)["members"] if m["state"] not in ("Z", "X")]
    if live:
        info = _server_info(run_dir)
        if info is not None and is_alive(int(info["pid"]), int(info["start_time"])):
            return {**info, "ok": True, "already_running": True, "members": live}
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
    spec: LaunchSpec = {
        "run_id": run_id,
        "argv": argv,
        "workdir": workdir,
        "run_dir": run_dir,
        "port": port,
        "boot_id": read_boot_id(),
    }
    report = _read_report(_spawn_supervisor(spec, env, log_path), timeout=30.0)
    if "error" in report:
        failed = cast(SupervisorError, report)
        tail = log_tail(log_path, 20, 8192)["lines"]
        return {
            "ok": False,
            "error": failed["error"],
            "exit_code": failed.get("exit_code"),
            "log_path": log_path,
            "log_tail": tail,
        }
    # The report becomes the answer, as it always has: the same dict, two keys added.
    answer = cast(LaunchAnswer, report)
    answer["ok"] = True
    answer["already_running"] = False
    return answer
