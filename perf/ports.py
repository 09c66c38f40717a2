"""Ports for the servers the tests and the perf scripts start (one allocator for both: the perf
scripts cannot import ``tests/``, so the tests import it from here).

A port asked of the kernel with ``bind(("127.0.0.1", 0))`` comes from the ephemeral range, and
is free only until the probe socket closes: any outgoing connection (the test's own HTTP
clients, a load generator, a database client) may take it as its local port before the server
binds it, and the server then fails with "address in use". A fixed ``31000 + n`` has the
opposite defect: every test asks for the same ports, so whatever an earlier test left on one (a
connection in TIME_WAIT, a server still dying) meets the next test there.

``free_port()`` hands out ports below the ephemeral range, where the kernel never picks a local
port by itself, each port at most once per process (a test run, a perf script), and only ports
that a plain bind (without SO_REUSEADDR) shows unused in any state."""

from __future__ import annotations

import errno
import os
import socket
import threading
from pathlib import Path

_SPAN = 8000  # ports below the ephemeral range to hand out; a run uses a few hundred


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def _worker_share() -> tuple[int, int]:
    """(index, count) of this pytest-xdist worker among the run's workers; (0, 1) outside one."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        index = int(worker.removeprefix("gw")) if worker.startswith("gw") else 0
    except ValueError:
        return 0, 1
    return (index, count) if 0 <= index < count else (0, 1)


class _Ports:
    def __init__(self) -> None:
        high = _ephemeral_low()
        low = max(1024, high - _SPAN)
        # The workers of one pytest-xdist run each get a slice of their own: two workers never
        # hand out the same port, even in the window between the check and the server's bind.
        index, count = _worker_share()
        share = (high - low) // count
        self.low = low + index * share
        self.high = self.low + share
        span = self.high - self.low
        # Another test run or script on the same machine starts elsewhere in the span.
        self.offset = (os.getpid() * 7919) % span
        self.issued = 0
        self.lock = threading.Lock()

    def next(self) -> int:
        span = self.high - self.low
        with self.lock:
            for _ in range(span):
                port = self.low + (self.offset + self.issued) % span
                self.issued += 1
                if _unused(port):
                    return port
        raise RuntimeError(f"no unused port in {self.low}-{self.high - 1}")


def _unused(port: int) -> bool:
    """Bindable on every address without SO_REUSEADDR: no listener, no connection in any
    state (TIME_WAIT included) and no bound socket uses the port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("0.0.0.0", port))  # noqa: S104 - a test bind, closed at once
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


_PORTS = _Ports()


def free_port() -> int:
    """A port no server, connection or earlier caller in this process uses, outside the range the
    kernel draws outgoing connections' ports from."""
    return _PORTS.next()
