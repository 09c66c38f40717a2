from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from hosts.transports.containers import ContainerHop
from hosts.transports.ssh import SSHTransport
from tests.fixtures.sshd import SshServer, running_sshd

# Cost of one command over SSH: a multiplexed transport (ControlMaster, the default)
# against a fresh connection per command, and the same through a pct hop. It starts its
# own sshd on 127.0.0.1 (needs openssh-server), so it measures the handshake and the
# round trip, not a network.
#
#     .venv/bin/python -m perf.bench_transport [-n 30]

PCT = str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "bin" / "pct")
TIMEOUT = 60.0


def _ssh(server: SshServer, control_dir: Path, *, multiplex: bool) -> SSHTransport:
    return SSHTransport(
        server.host,
        user=server.user,
        port=server.port,
        identity_file=server.identity_file,
        known_hosts_file=server.known_hosts_file,
        multiplex=multiplex,
        control_dir=control_dir,
    )


async def _durations(transport: SSHTransport | ContainerHop, n: int) -> list[float]:
    durations = []
    for _ in range(n):
        result = await transport.run(["true"], timeout=TIMEOUT)
        if not result.ok:
            raise SystemExit(f"{transport.describe()}: exit {result.returncode}")
        durations.append(result.duration)
    return durations


def _report(name: str, durations: list[float]) -> None:
    ms = sorted(d * 1000 for d in durations)
    p90 = ms[min(len(ms) - 1, int(len(ms) * 0.9))]
    print(
        f"{name:<32} median {statistics.median(ms):7.1f} ms   "
        f"min {ms[0]:7.1f}   p90 {p90:7.1f}   (n={len(ms)})"
    )


async def bench(server: SshServer, n: int) -> None:
    control_dir = Path(tempfile.mkdtemp(prefix="sdb-", dir="/tmp"))
    try:
        mux = _ssh(server, control_dir, multiplex=True)
        first = await _durations(mux, 1)
        _report("multiplexed: first (handshake)", first)
        _report("multiplexed: following", await _durations(mux, n))
        _report(
            "multiplexed + pct exec",
            await _durations(ContainerHop("pct", "129", tool=PCT, inner=mux), n),
        )
        await mux.close()
        fresh = _ssh(server, control_dir, multiplex=False)
        _report("fresh connection each", await _durations(fresh, n))
        _report(
            "fresh + pct exec",
            await _durations(ContainerHop("pct", "129", tool=PCT, inner=fresh), n),
        )
    finally:
        shutil.rmtree(control_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Cost of one command over multiplexed SSH versus a fresh connection."
    )
    parser.add_argument("-n", type=int, default=30, help="commands per case (default 30)")
    args = parser.parse_args(argv)
    with running_sshd() as server:
        print(f"sshd on 127.0.0.1:{server.port}; `true` per command; {sys.platform}")
        asyncio.run(bench(server, args.n))


if __name__ == "__main__":
    main()
