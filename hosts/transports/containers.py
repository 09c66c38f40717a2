from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from hosts.transports import validation
from hosts.transports.base import CommandResult, Hop, Transport, TransportConfigError, tail
from hosts.transports.local import LocalTransport

ContainerKind = Literal["pct", "lxc-attach", "docker", "incus"]
KINDS: tuple[ContainerKind, ...] = ("pct", "lxc-attach", "docker", "incus")
COMMAND_NOT_FOUND = 127

# Each tool's own messages for "could not get in" (as opposed to the command's output),
# mapped to a reason; "{ident}" is the container. The tools' exit statuses are not
# enough: lxc-attach and docker exit with the command's status once inside. The patterns
# name the container where the tool's message does, so that a hop does not claim the
# error of a hop further in that its output passes through.
_FAILURES: dict[ContainerKind, list[tuple[str, str]]] = {
    "pct": [
        (r"Configuration file '[^']*/lxc/{ident}\.conf' does not exist",
         "container {ident} does not exist (on this node)"),
        (r"CT {ident} not running", "container {ident} is not running"),
        (r"value does not look like a valid VM ID", "{ident} is not a valid CT id"),
        (r"(?i:Permission check failed|only root|must be root)",
         "permission denied (pct needs root on the node)"),
    ],
    "lxc-attach": [
        # lxc-attach cannot tell a stopped container from an unknown one.
        (r"lxc-attach: {ident}: .*(?:Failed to get init pid|is not running|not defined)",
         "container {ident} is not running (or does not exist)"),
        (r"lxc-attach: {ident}: .*(?:Failed to attach|Insufficient privileges)",
         "could not attach to container {ident}"),
    ],
    "docker": [
        (r"No such container: {ident}\b", "container {ident} does not exist"),
        (r"Error response from daemon: .*(?:is not running|is paused|is restarting)",
         "container {ident} is not running"),
        (r"Cannot connect to the Docker daemon", "the Docker daemon is not reachable"),
        (r"permission denied while trying to connect to the Docker daemon",
         "permission denied (not allowed to use the Docker daemon)"),
    ],
    "incus": [
        (r"(?i)^Error: (?:Instance not found|Not Found)", "container {ident} does not exist"),
        (r"(?i)^Error: Instance is not running", "container {ident} is not running"),
        (r"(?i)^Error: .*(?:permission denied|Failed to connect)",
         "cannot reach the incus daemon (permission denied or not running)"),
    ],
}  # fmt: skip


class ContainerHop(Hop):
    """Runs argv inside a container through ``pct exec``, ``lxc-attach``, ``docker exec`` or
    ``incus exec``. These tools pass argv on without a shell, so this hop quotes nothing.

    ``tool`` is the executable to call (default: the kind's name, found on PATH where it
    runs). ``clear_env`` is lxc-attach's ``--clear-env``.
    """

    def __init__(
        self,
        kind: ContainerKind,
        ident: str,
        *,
        inner: Transport | None = None,
        tool: str | None = None,
        clear_env: bool = False,
    ) -> None:
        super().__init__(inner if inner is not None else LocalTransport())
        if kind not in KINDS:
            raise TransportConfigError(f"unknown container kind: {kind!r}")
        if clear_env and kind != "lxc-attach":
            raise TransportConfigError("clear_env applies to lxc-attach only")
        self.kind: ContainerKind = kind
        self.ident = validation.vmid(ident) if kind == "pct" else validation.container(ident)
        self.tool = validation.tool(tool) if tool is not None else kind
        self.clear_env = clear_env

    def wrap(self, argv: Sequence[str], *, stdin: bool) -> list[str]:
        if not argv:
            raise ValueError("empty argv")
        if self.kind == "pct":
            return [self.tool, "exec", self.ident, "--", *argv]
        if self.kind == "lxc-attach":
            clear = ["--clear-env"] if self.clear_env else []
            return [self.tool, "-n", self.ident, *clear, "--", *argv]
        if self.kind == "docker":
            # Without -i docker exec gives the command no stdin; with it, stdin is attached.
            return [self.tool, "exec", *(["-i"] if stdin else []), self.ident, *argv]
        return [self.tool, "exec", self.ident, "--", *argv]

    def label(self) -> str:
        if self.kind == "lxc-attach":
            return f"lxc-attach -n {self.ident}"
        return f"{self.kind} exec {self.ident}"

    def location(self) -> str:
        where = self.inner.location()
        name = f"CT {self.ident}" if self.kind in ("pct", "lxc-attach") else self.ident
        return f"{name} on {where}" if where else name

    def failure(self, result: CommandResult) -> str | None:
        if result.returncode == 0:
            return None
        stderr = tail(result.stderr)
        ident = re.escape(self.ident)
        for pattern, reason in _FAILURES[self.kind]:
            if re.search(pattern.replace("{ident}", ident), stderr, re.M):
                return reason.format(ident=self.ident)
        # "pct: command not found" (bash, or LocalTransport), "sh: 1: pct: not found" (dash)
        missing = re.escape(self.tool) + r": (?:command not found|not found|No such file)"
        if result.returncode == COMMAND_NOT_FOUND and re.search(missing, stderr):
            return f"{self.tool} not found on {self.inner.location() or 'this machine'}"
        return None
