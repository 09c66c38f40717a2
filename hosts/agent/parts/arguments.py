"""Reading a command's JSON arguments, with a clear refusal for each bad one.

A command's arguments arrive as a free-form JSON object (``dict[str, object]``, spelt out: an
alias would be evaluated on the far side's Python 3.8, where ``dict[...]`` is not subscriptable);
each value is read through one of the checked readers below, which narrow it.
"""

from __future__ import annotations

from typing import TypedDict

from hosts.agent.parts.base import RUN_ID_RE, AgentError
from hosts.agent.parts.files import expand_run_dir
from hosts.agent.parts.procfs import read_boot_id


def _opt_number(args: dict[str, object], key: str, default: float | None) -> float | None:
    """The number at ``key`` (``default`` when absent; None when null), refused when it is
    anything else (a bool included, though Python counts it as an int)."""
    value = args.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise AgentError(f"{key} must be a number")
    return value


def _opt_int(args: dict[str, object], key: str, default: int | None = None) -> int | None:
    value = _opt_number(args, key, default)
    return None if value is None else int(value)


def _req_int(args: dict[str, object], key: str) -> int:
    value = _opt_int(args, key)
    if value is None:
        raise AgentError(f"{key} is required")
    return value


def _opt_float(args: dict[str, object], key: str, default: float) -> float:
    value = _opt_number(args, key, default)
    return default if value is None else float(value)


def _opt_str(args: dict[str, object], key: str) -> str | None:
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise AgentError(f"{key} must be a string")
    return value


def _req_str(args: dict[str, object], key: str) -> str:
    value = _opt_str(args, key)
    if not value:
        raise AgentError(f"{key} is required")
    return value


def _opt_run_dir(args: dict[str, object]) -> str | None:
    value = _opt_str(args, "run_dir")
    return expand_run_dir(value) if value else value


def _run_id(args: dict[str, object]) -> str:
    run_id = _req_str(args, "run_id")
    if RUN_ID_RE.match(run_id) is None:
        raise AgentError("run_id must be 1-128 characters of [A-Za-z0-9._:@+-]")
    return run_id


def _int_list(args: dict[str, object], key: str) -> list[int]:
    value = args.get(key) or []
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise AgentError(f"{key} must be a list of integers")
    return list(value)


def _str_list(args: dict[str, object], key: str) -> list[str] | None:
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise AgentError(f"{key} must be a list of strings")
    return list(value)


class Identity(TypedDict):
    """What identifies a run's processes: its marker, and the ids recorded at its launch."""

    run_id: str
    pid: int | None
    pgid: int | None
    sid: int | None
    start_time: int | None


def _identity(args: dict[str, object]) -> Identity:
    ident: Identity = {
        "run_id": _run_id(args),
        "pid": _opt_int(args, "pid"),
        "pgid": _opt_int(args, "pgid"),
        "sid": _opt_int(args, "sid"),
        "start_time": _opt_int(args, "start_time"),
    }
    boot_id = _opt_str(args, "boot_id")
    if boot_id and boot_id != read_boot_id():
        # The host rebooted since the launch: recorded ids mean nothing, only the marker does.
        ident["pid"] = ident["pgid"] = ident["sid"] = ident["start_time"] = None
    return ident
