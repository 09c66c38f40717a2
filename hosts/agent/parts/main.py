"""The command table, the controller fence, and the script's entry point."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
import time
import traceback
from typing import Any

from hosts.agent.parts.base import BEGIN_MARKER, RESULT_MARKER, AgentError
from hosts.agent.parts.control import (
    cmd_kill_pids,
    cmd_log_tail,
    cmd_members,
    cmd_status,
    cmd_stop,
    cmd_verify,
)
from hosts.agent.parts.files import expand_run_dir, private_run_dir, write_atomic
from hosts.agent.parts.launch import cmd_launch, cmd_preflight
from hosts.agent.parts.probe import cmd_probe

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


def run_command(argv: list[str]) -> dict[str, object]:
    """The command's answer (each command declares its own shape) as a plain dict for `main`."""
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
            return dict(handler(args))
    return dict(handler(args))


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
