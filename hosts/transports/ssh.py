from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import stat
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from hosts.transports import validation
from hosts.transports.base import CommandResult, Hop, Transport, TransportConfigError, tail
from hosts.transports.local import LocalTransport

HostKeyPolicy = Literal["strict", "accept-new"]
SSH_FAILED = 255  # ssh's own errors; a remote command can exit 255 too
CONTROL_NAME_LEN = 40  # hex digits of the control socket's name (as long as ssh's %C)
UNIX_PATH_MAX = 107

# (pattern in ssh's stderr, operator-level reason); the first match wins.
_FAILURES: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"REMOTE HOST IDENTIFICATION HAS CHANGED"),
        "host key verification failed (the host key changed; check known_hosts)",
    ),
    (
        re.compile(r"Host key verification failed"),
        "host key verification failed (no matching key in known_hosts)",
    ),
    (re.compile(r"Permission denied \(([^)]*)\)"), "permission denied ({0})"),
    (re.compile(r"Connection refused"), "connection refused"),
    (re.compile(r"Could not resolve hostname"), "could not resolve the host name"),
    (re.compile(r"Connection timed out|Operation timed out"), "connection timed out"),
    (re.compile(r"No route to host|Network is unreachable"), "host unreachable"),
    (re.compile(r"Too many authentication failures"), "too many authentication failures"),
    (re.compile(r"Timeout, server \S+ not responding"), "connection lost (server not responding)"),
    (
        re.compile(r"kex_exchange_identification|Connection closed by|Connection reset by"),
        "connection closed by the server",
    ),
    (
        re.compile(r"Load key .*|no such identity.*|Identity file .* not accessible.*"),
        "cannot use the identity file: {0}",
    ),
    (
        re.compile(r"^ssh: (.*)$|Bad configuration option.*|command-line line \d+: .*", re.M),
        "ssh failed: {0}",
    ),
]


def _reason(stderr: str) -> str | None:
    for pattern, reason in _FAILURES:
        match = pattern.search(stderr)
        if match:
            detail = next((g for g in match.groups() if g), match.group(0))
            return reason.format(detail.strip())
    return None


# The control sockets this process's transports have named: its masters, if any answer.
_SOCKETS_USED: set[Path] = set()


def default_control_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"specdash-ssh-{os.getuid()}"


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` as 0700, or refuse one another user could reach (control sockets
    there give shell access to every host with a live master connection)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise TransportConfigError(f"ssh control directory {path} is not a directory of ours")
    if info.st_mode & 0o077:
        raise TransportConfigError(f"ssh control directory {path} is reachable by others")


class SSHTransport(Hop):
    """The system ``ssh`` client, with host-key checking on and connection multiplexing.

    The remote command is ``shlex.join(argv)`` of whatever the hops beyond this one built:
    sshd hands that string to the login shell, which splits it back into the same argv.
    """

    def __init__(
        self,
        host: str,
        *,
        user: str | None = None,
        port: int | None = None,
        identity_file: str | os.PathLike[str] | None = None,
        known_hosts_file: str | os.PathLike[str] | None = None,
        host_key_policy: HostKeyPolicy = "strict",
        jump: str | None = None,
        multiplex: bool = True,
        control_dir: str | os.PathLike[str] | None = None,
        control_persist: str = "10m",
        connect_timeout: int = 5,
        ssh_path: str = "ssh",
        inner: Transport | None = None,
    ) -> None:
        super().__init__(inner if inner is not None else LocalTransport())
        if host_key_policy not in ("strict", "accept-new"):
            raise TransportConfigError(f"invalid host key policy: {host_key_policy!r}")
        self.host = validation.host(host)
        self.user = validation.user(user) if user is not None else None
        self.port = validation.port(port) if port is not None else None
        self.identity_file = os.fspath(identity_file) if identity_file is not None else None
        self.known_hosts_file = os.fspath(known_hosts_file) if known_hosts_file else None
        self.host_key_policy = host_key_policy
        self.jump = validation.jump(jump) if jump is not None else None
        self.multiplex = multiplex
        self.control_dir = Path(control_dir) if control_dir else default_control_dir()
        self.control_persist = validation.control_persist(control_persist)
        self.connect_timeout = validation.port(connect_timeout)
        self.ssh_path = validation.tool(ssh_path)
        self._options = self._build_options()

    @property
    def destination(self) -> str:
        return f"{self.user}@{self.host}" if self.user else self.host

    def _build_options(self) -> list[str]:
        checking = "yes" if self.host_key_policy == "strict" else "accept-new"
        opts = [
            "-T",
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={self.connect_timeout}",
            "-o", "ServerAliveInterval=15",
            "-o", "ServerAliveCountMax=3",
            "-o", f"StrictHostKeyChecking={checking}",
        ]  # fmt: skip
        if self.known_hosts_file:
            known = validation.option_path(self.known_hosts_file, "known_hosts")
            opts += ["-o", f"UserKnownHostsFile={known}"]
        if self.identity_file:
            identity = validation.option_path(self.identity_file, "identity")
            opts += ["-i", identity, "-o", "IdentitiesOnly=yes"]
        if self.port is not None:
            opts += ["-p", str(self.port)]
        if self.jump:
            opts += ["-J", self.jump]
        opts += self.control_options()
        return opts

    def control_options(self) -> list[str]:
        if not self.multiplex:
            return []
        control = validation.option_path(str(self.control_dir), "control directory")
        if len(str(self.control_dir)) + 1 + CONTROL_NAME_LEN > UNIX_PATH_MAX:
            raise TransportConfigError(f"ssh control directory path too long: {self.control_dir}")
        _SOCKETS_USED.add(Path(control) / self.control_name())
        return [
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={control}/{self.control_name()}",
            "-o", f"ControlPersist={self.control_persist}",
        ]  # fmt: skip

    def control_name(self) -> str:
        """The master socket's name: a digest of everything that decides how the connection
        is made. ssh's own ``%C`` covers only host, port, user and jump, so two host entries
        differing in identity or known_hosts settings would share one master, and the
        second would run over the first's connection without its own checks. The process id
        makes the master this process's own: it closes its masters as it exits
        (``close_own_masters``), which must not cut another process's sessions."""
        settings = [
            os.getpid(),
            self.host,
            self.user,
            self.port,
            self.jump,
            self.identity_file,
            self.known_hosts_file,
            self.host_key_policy,
            self.connect_timeout,
        ]
        digest = hashlib.sha256(json.dumps(settings).encode()).hexdigest()
        return digest[:CONTROL_NAME_LEN]

    def label(self) -> str:
        port = f":{self.port}" if self.port is not None else ""
        via = f" via {self.jump}" if self.jump else ""
        return f"ssh {self.destination}{port}{via}"

    def location(self) -> str:
        return self.destination

    def wrap(self, argv: Sequence[str], *, stdin: bool) -> list[str]:
        if not argv:
            raise ValueError("empty argv")
        # The one place this hop quotes: sshd runs the string through the login shell.
        return [self.ssh_path, *self._options, self.destination, shlex.join(argv)]

    def prepare(self) -> None:
        if self.multiplex:
            ensure_private_dir(self.control_dir)

    def failure(self, result: CommandResult) -> str | None:
        if result.returncode != SSH_FAILED:
            return None
        return _reason(tail(result.stderr))

    async def control(
        self,
        command: Literal["check", "exit"],
        *,
        timeout: float = 10,  # noqa: ASYNC109 - passed to Transport.run
    ) -> bool:
        """``ssh -O check|exit``: whether a master connection answered."""
        if not self.multiplex:
            return False
        argv = [self.ssh_path, *self._options, "-O", command, self.destination]
        result = await self.inner.run(argv, timeout=timeout)
        return result.returncode == 0

    async def close(self) -> None:
        """Stop the master connection, if one is running."""
        await self.control("exit")


def master_pid(socket_path: Path, *, ssh_path: str = "ssh", timeout: float = 5) -> int | None:
    """The pid of the master connection listening on ``socket_path``, or None (none answers)."""
    try:
        check = subprocess.run(
            [ssh_path, "-o", f"ControlPath={socket_path}", "-O", "check", "specdash-master"],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"pid=(\d+)", check.stderr)
    return int(match.group(1)) if match else None


def close_own_masters(*, ssh_path: str = "ssh", timeout: float = 5) -> list[int]:
    """Ask each master connection this process's transports named (``ssh -O exit``) to exit,
    wait for them to go, and return their pids. Synchronous: for a process on its way out.
    The sockets' names hold this process's id (``control_name``), so no other process's
    master (a job worker beside a web process) is among them."""
    closed = []
    for socket_path in sorted(_SOCKETS_USED):
        pid = master_pid(socket_path, ssh_path=ssh_path, timeout=timeout)
        if pid is None:
            continue
        try:
            subprocess.run(
                [ssh_path, "-o", f"ControlPath={socket_path}", "-O", "exit", "specdash-master"],
                capture_output=True, timeout=timeout, check=False,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            continue
        closed.append(pid)
    # "Exit request sent." comes before the master has gone: wait for each (not our children,
    # so there is no zombie to reap), so the caller's process exits after them.
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{pid}").exists() for pid in closed) and time.monotonic() < deadline:
        time.sleep(0.05)
    return closed
