from __future__ import annotations

import re
from collections.abc import Callable

from hosts.transports.base import TransportConfigError

# Each value below ends up as one argv item of ssh, pct, docker...; a leading "-" would
# make it an option there ("-oProxyCommand=..." as a host name runs a command).
_HOST = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?|\[?[0-9A-Fa-f:.]+(?:%\w+)?\]?")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
_VMID = re.compile(r"[1-9][0-9]{2,8}")
_CONTAINER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_PERSIST = re.compile(r"yes|no|[0-9]+[smhdw]?")
_UNSAFE_PATH = re.compile(r"[\s\"'\\\x00-\x1f\x7f]")


def _fullmatch_check(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    """A check that returns a value ``pattern`` matches whole and refuses anything else."""

    def check(value: str) -> str:
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise TransportConfigError(f"invalid {what}: {value!r}")
        return value

    return check


host = _fullmatch_check(_HOST, "host name")
user = _fullmatch_check(_USER, "user name")
vmid = _fullmatch_check(_VMID, "Proxmox container id (100-999999999)")
container = _fullmatch_check(_CONTAINER, "container name")
control_persist = _fullmatch_check(_PERSIST, "ControlPersist value")


def port(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536:
        raise TransportConfigError(f"invalid port: {value!r}")
    return value


def jump(value: str) -> str:
    """``[user@]host[:port]``, comma-separated for several jumps (as ``ssh -J``)."""
    for part in value.split(","):
        rest = part
        if "@" in rest:
            name, rest = rest.split("@", 1)
            user(name)
        if rest.count(":") == 1:
            rest, number = rest.split(":")
            if not number.isdigit():
                raise TransportConfigError(f"invalid jump host: {value!r}")
            port(int(number))
        host(rest)
    return value


def option_path(value: str, what: str) -> str:
    """A path given to ssh inside ``-o Name=path``, where whitespace and quotes are syntax
    and ``%`` starts a token; returned with ``%`` escaped."""
    if not value or value.startswith("-") or _UNSAFE_PATH.search(value):
        raise TransportConfigError(f"unusable {what} path: {value!r}")
    return value.replace("%", "%%")


def tool(value: str) -> str:
    if not value or value.startswith("-") or _UNSAFE_PATH.search(value):
        raise TransportConfigError(f"invalid tool path: {value!r}")
    return value
