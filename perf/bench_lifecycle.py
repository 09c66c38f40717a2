"""Server lifecycle latency, end to end through a real job worker and the simulator.

(a) ready: from the moment the server is ready (an independent poller sees /health answer
    200 for the first time) to specdash recording ``ready`` (``ServerInstance.ready_at``,
    what every page and websocket then shows). Target: under 1 s.
(b) stop: from the Stop request (``instance_stop``, what the button calls) to the verified
    ``stopped`` (``stopped_at``: no process left, port closed, GPU memory back) for a server
    that exits on SIGTERM. Target: at most the stop grace period + 2 s.

It runs a Worker in this process against a temporary SQLite database (nothing of the
project's ``var/`` is touched), on this machine or, with ``--via ssh``, through a loopback
sshd (needs openssh-server).

    .venv/bin/python -m perf.bench_lifecycle [-n 3] [--via local|ssh] [--grace 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
SIM_BIN = ROOT / "benchlib" / "simulator" / "bin"
READY_TARGET_S = 1.0
STOP_MARGIN_S = 2.0
HEALTH_POLL_S = 0.005
DEADLINE_S = 120.0


@dataclass
class Round:
    ready_lag_s: float
    stop_s: float
    final_state: str


def _setup_django(var_dir: Path, grace: float) -> None:
    # Before django.setup(): settings read these once, at import.
    os.environ["SPECDASH_VAR_DIR"] = str(var_dir)
    os.environ["SPECDASH_DATABASE_URL"] = f"sqlite:///{var_dir / 'bench.sqlite3'}"
    os.environ["SPECDASH_RUN_ROOT"] = str(var_dir / "runs")
    os.environ["SPECDASH_STOP_GRACE_S"] = f"{grace:g}"
    os.environ.pop("SPECDASH_REDIS_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "specdash.settings"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _make_profile(state_dir: Path, ssh: Any, load_seconds: float) -> Any:
    from hosts.models import Engine, Host, HostKind, ServerProfile

    env = {"SPECDASH_SIM_STATE_DIR": str(state_dir), "SPECDASH_SIM_GPU_COUNT": "2"}
    fields: dict[str, Any] = {"kind": HostKind.LOCAL}
    if ssh is not None:
        fields = {
            "kind": HostKind.SSH,
            "address": ssh.host,
            "ssh_user": ssh.user,
            "ssh_port": ssh.port,
            "identity_file": str(ssh.identity_file),
            "known_hosts_file": str(ssh.known_hosts_file),
        }
    host = Host.objects.create(name="bench", path_prepend=str(SIM_BIN), command_env=env, **fields)
    port = free_port()
    argv = [
        sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1",
        "--port", str(port), "--profile", "fast", "--gpus", "0,1", "--workers", "2",
        "--gpu-memory-gb", "10", "--load-seconds", f"{load_seconds:g}",
    ]  # fmt: skip
    return ServerProfile.objects.create(
        name="bench simulator", engine=Engine.SIMULATOR, host=host, launch_argv=argv,
        env=env, workdir=str(ROOT), port=port, gpu_ids=[0, 1], readiness_timeout_s=60,
        served_model_name="specdash-sim",
    )  # fmt: skip


async def _first_health(url: str) -> float:
    """Wall-clock time of the first 200 from /health, polled independently of specdash."""
    import httpx

    # No keep-alive: a pooled connection would keep the port busy for the stop's check.
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(2.0), limits=limits) as client:
        while True:
            try:
                response = await client.get(url)
                if response.status_code == 200:
                    return time.time()
            except httpx.HTTPError:
                pass
            await asyncio.sleep(HEALTH_POLL_S)


async def _wait_for(instance_id: int, predicate: Any) -> Any:
    from hosts.models import ServerInstance

    async with asyncio.timeout(DEADLINE_S):
        while True:
            instance = await ServerInstance.objects.select_related("profile").aget(pk=instance_id)
            if predicate(instance):
                return instance
            await asyncio.sleep(0.02)


async def _one_round(profile: Any) -> Round:
    from asgiref.sync import sync_to_async

    from hosts import services
    from hosts.models import InstanceState

    instance = await sync_to_async(services.instance_start)(profile=profile)
    health_url = f"http://127.0.0.1:{profile.port}{profile.readiness_path}"
    healthy_at = await asyncio.wait_for(_first_health(health_url), DEADLINE_S)
    ready = await _wait_for(
        instance.pk, lambda i: i.ready_at is not None or i.state == InstanceState.FAILED
    )
    if ready.ready_at is None:
        raise SystemExit(f"the server did not become ready: {ready.reason}")
    ready_lag = ready.ready_at.timestamp() - healthy_at

    stop_requested_at = time.time()
    await sync_to_async(services.instance_stop)(instance=ready)
    done = await _wait_for(
        instance.pk, lambda i: i.state in {InstanceState.STOPPED, InstanceState.DIRTY}
    )
    stop_s = (done.stopped_at.timestamp() if done.stopped_at else time.time()) - stop_requested_at
    return Round(ready_lag, stop_s, done.state)


async def _bench(profile: Any, rounds: int) -> list[Round]:
    from core.jobs.worker import Worker

    stop = asyncio.Event()
    worker = asyncio.create_task(Worker(worker_id="bench").run(stop))
    try:
        return [await _one_round(profile) for _ in range(rounds)]
    finally:
        stop.set()
        await worker


def _line(name: str, values: list[float], target: str, ok: bool) -> str:
    return (
        f"{name:<36} median {statistics.median(values):6.3f} s   max {max(values):6.3f} s"
        f"   target {target:<9} {'PASS' if ok else 'FAIL'}"
    )


@contextlib.contextmanager
def _maybe_sshd(via: str, workdir: Path) -> Iterator[Any]:
    if via != "ssh":
        yield None
        return
    from tests.fixtures.sshd import start_sshd, stop_sshd

    server = start_sshd(workdir / "sshd")
    try:
        yield server
    finally:
        stop_sshd(server)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Server lifecycle latency: ready and stop.")
    parser.add_argument("-n", type=int, default=3, help="start/stop rounds (default 3)")
    parser.add_argument("--via", choices=["local", "ssh"], default="local")
    parser.add_argument("--grace", type=float, default=10.0, help="stop grace period, s")
    parser.add_argument("--load-seconds", type=float, default=1.0, help="simulated load time")
    args = parser.parse_args(argv)

    var_dir = Path(tempfile.mkdtemp(prefix="sdbench-", dir="/tmp"))  # short: ssh sockets
    try:
        _setup_django(var_dir, args.grace)
        with _maybe_sshd(args.via, var_dir) as ssh:
            state_dir = var_dir / "sim-gpu"
            state_dir.mkdir()
            profile = _make_profile(state_dir, ssh, args.load_seconds)
            results = asyncio.run(_bench(profile, args.n))
            if ssh is not None:
                from hosts.lifecycle.remote import transport_for
                from hosts.transports.ssh import SSHTransport

                hop = transport_for(profile.host, None)
                if isinstance(hop, SSHTransport):
                    asyncio.run(hop.close())
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)

    lags = [r.ready_lag_s for r in results]
    stops = [r.stop_s for r in results]
    clean = all(r.final_state == "stopped" for r in results)
    stop_target = args.grace + STOP_MARGIN_S
    ready_ok = max(lags) < READY_TARGET_S
    stop_ok = clean and max(stops) <= stop_target
    print(
        f"lifecycle: {args.n} rounds via {args.via}, simulator 'fast' "
        f"(load {args.load_seconds:g} s), stop grace {args.grace:g} s"
    )
    print(_line("(a) /health 200 -> specdash ready", lags, f"< {READY_TARGET_S:g} s", ready_ok))
    print(_line("(b) Stop -> verified stopped", stops, f"<= {stop_target:g} s", stop_ok))
    if not clean:
        print("   not every stop ended stopped: " + ", ".join(r.final_state for r in results))
    return 0 if ready_ok and stop_ok else 1


if __name__ == "__main__":
    sys.exit(main())
