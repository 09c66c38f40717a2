"""Reading a command's JSON arguments, with a clear refusal for each bad one."""

from __future__ import annotations

from typing import Any

from hosts.agent.parts.base import RUN_ID_RE, AgentError
from hosts.agent.parts.files import expand_run_dir
from hosts.agent.parts.procfs import read_boot_id


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
