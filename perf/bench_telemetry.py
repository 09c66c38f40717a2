from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import psutil

from perf.ports import free_port

# Telemetry end to end: the latency from a GPU sample taken on the host (the probe reading the
# `nvidia-smi -lms` stream) to the point drawn in a browser, with 20 viewers on one sweep page,
# and the probe's CPU cost per host.
#
#     .venv/bin/python -m perf.bench_telemetry [--seconds 30] [--viewers 20]
#
# It starts its own dashboard (`manage.py serve`: Daphne + the job worker, SQLite, in-memory
# channel layer), the demo seed (host "local" with the simulator's nvidia-smi stand-in, 8
# GPUs), an eagle3 simulator holding memory on 4 of them, a READY instance and a running sweep.
# Viewers: one Chromium page that draws the charts (its telemetry.js records, per GPU sample,
# `Date.now() - t` after extendTraces in window.__telemetryLatencies) plus viewers-1 plain
# websockets in a second page (latency at message arrival). Then the probe alone, in this
# process, over the local transport and over ssh to a loopback sshd: CPU of this process
# (parsing + sampling) and of the stream processes (nvidia-smi stand-in, ssh client).

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "bench-telemetry-pass-123"  # noqa: S105 - a throw-away demo login

SETUP = """
import json, uuid
from django.utils import timezone
from benchmarks.sweeps.models import Sweep, SweepState
from hosts.models import InstanceState, ServerInstance, ServerProfile
profile = ServerProfile.objects.get(name="Simulated SGLang EAGLE-3")
instance = ServerInstance.objects.create(
    profile=profile, host=profile.host, port={port}, gpu_ids=[0, 1, 2, 3],
    state=InstanceState.READY, run_id="sd-bench-" + uuid.uuid4().hex[:12], launch_argv=["sim"],
)
sweep = Sweep.objects.create(instance=instance, levels=[1], load={{"duration": 600}},
                             state=SweepState.RUNNING, started_at=timezone.now())
print(json.dumps({{"instance": instance.pk, "sweep": sweep.pk}}))
"""

SOCKETS_JS = """
(args) => {
  window.__raw = [];
  window.__rawMessages = 0;
  for (let i = 0; i < args.n; i++) {
    const ws = new WebSocket("ws://" + location.host + args.path);
    ws.onmessage = (event) => {
      const now = Date.now();
      const m = JSON.parse(event.data);
      if (m.type !== "telemetry.samples") return;
      window.__rawMessages += 1;
      m.samples.forEach((s) => { if (s.k === "gpu") window.__raw.push(now - s.t * 1000); });
    };
  }
}
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def summary(values: list[float]) -> str:
    if not values:
        return "no samples"
    return (
        f"n={len(values)} p50={pct(values, 0.5):.1f} p95={pct(values, 0.95):.1f} "
        f"p99={pct(values, 0.99):.1f} max={max(values):.1f} ms"
    )


def manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
        capture_output=True, text=True, timeout=180,
    ).stdout  # fmt: skip


def wait_http(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not answer at {url}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@contextmanager
def dashboard(var: Path) -> Iterator[tuple[str, dict[str, str], subprocess.Popen[bytes]]]:
    port = free_port()
    env = {**os.environ, "SPECDASH_VAR_DIR": str(var), "SPECDASH_DEMO_PASSWORD": PASSWORD,
           "SPECDASH_RUN_ROOT": str(var / "runs"), "PYTHONUNBUFFERED": "1"}  # fmt: skip
    env.pop("DJANGO_SETTINGS_MODULE", None)
    manage(env, "migrate", "--no-input", "-v", "0")
    manage(env, "seed_demo")
    log = (var / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/accounts/login/", proc, "the dashboard")
        yield url, env, proc
    finally:
        stop(proc)
        log.close()


@contextmanager
def simulator(var: Path) -> Iterator[int]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1", "--port", str(port),
         "--profile", "eagle3", "--gpus", "0,1,2,3", "--workers", "0", "--gpu-memory-gb", "20",
         "--state-dir", str(var / "sim-gpu")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/health", proc, "the simulator")
        yield port
    finally:
        stop(proc)


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def stream_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(part.endswith("nvidia-smi") for part in cmdline) and "-lms" in cmdline:
            found.append(proc)
    return found


def browser_run(url: str, sweep_id: int, viewers: int, seconds: float) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    path = f"/ws/telemetry/sweeps/{sweep_id}/"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        page.goto(url + "/accounts/login/")
        page.fill("input[name=username]", "operator")
        page.fill("input[name=password]", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(url + "/")
        page.goto(f"{url}/sweeps/{sweep_id}/")
        page.wait_for_function("() => window.__telemetryLatencies.length >= 2", timeout=60_000)
        others = context.new_page()
        others.goto(url + "/")
        others.evaluate(SOCKETS_JS, {"n": viewers - 1, "path": path})
        time.sleep(3)  # let every viewer connect before measuring
        page.evaluate("window.__telemetryLatencies.length = 0")
        others.evaluate("window.__raw.length = 0")
        time.sleep(seconds)
        drawn = list(page.evaluate("window.__telemetryLatencies"))
        raw = list(others.evaluate("window.__raw"))
        messages = int(others.evaluate("window.__rawMessages"))
        browser.close()
    return {"drawn": drawn, "raw": raw, "messages": messages}


def ssh_processes(server_pid: int, port: int) -> list[psutil.Process]:
    """The sshd side of the connections and the ssh clients (the master included)."""
    found = psutil.Process(server_pid).children(recursive=True)
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline and cmdline[0].endswith("ssh") and str(port) in cmdline:
            found.append(proc)
    return found


async def probe_alone(
    transport: Any, wrap: Any, seconds: float, *, remote: bool, extra: Any = None
) -> dict[str, float]:
    from hosts.telemetry.nvidia_smi import gpu_query_argv
    from hosts.telemetry.probes import GpuStreamProbe, LocalHostProbe, RemoteHostProbe, Sample

    samples: list[Sample] = []
    gpu = GpuStreamProbe(transport, wrap(gpu_query_argv(1000)), sink=samples.append)
    load = (RemoteHostProbe(transport, sink=samples.append) if remote
            else LocalHostProbe(sink=samples.append))  # fmt: skip
    tasks = [asyncio.create_task(gpu.run()), asyncio.create_task(load.run())]
    await asyncio.sleep(2.0)  # streams started and warm
    me = psutil.Process()
    children = {p.pid: p for p in [*me.children(recursive=True), *stream_processes(),
                                   *(extra() if extra else [])]}.values()  # fmt: skip
    before_self = cpu_seconds(me)
    before_children = {p.pid: cpu_seconds(p) for p in children if p.is_running()}
    started = time.perf_counter()
    count = len(samples)
    await asyncio.sleep(seconds)
    wall = time.perf_counter() - started
    after_self = cpu_seconds(me)
    after_children = 0.0
    for p in children:
        with suppress(psutil.Error):
            after_children += cpu_seconds(p) - before_children.get(p.pid, 0.0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "samples_per_s": (len(samples) - count) / wall,
        "in_process_pct": 100 * (after_self - before_self) / wall,
        "stream_processes_pct": 100 * after_children / wall,
    }


def probe_costs(var: Path, seconds: float) -> dict[str, dict[str, float]]:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "specdash.settings")
    os.environ["SPECDASH_VAR_DIR"] = str(var)
    django.setup()
    from hosts.lifecycle.remote import with_host_env
    from hosts.transports.local import LocalTransport
    from hosts.transports.ssh import SSHTransport
    from tests.fixtures.sshd import running_sshd

    sim_bin = ROOT / "benchlib" / "simulator" / "bin"
    env = {"SPECDASH_SIM_STATE_DIR": str(var / "sim-gpu")}

    def wrap(argv: list[str]) -> list[str]:
        return with_host_env(argv, path_prepend=str(sim_bin), env=env)

    out = {"local": asyncio.run(probe_alone(LocalTransport(), wrap, seconds, remote=False))}
    with running_sshd() as server, tempfile.TemporaryDirectory(prefix="sd-ssh-") as control:
        ssh = SSHTransport(
            server.host, user=server.user, port=server.port, identity_file=server.identity_file,
            known_hosts_file=server.known_hosts_file, control_dir=control,
        )  # fmt: skip
        out["ssh"] = asyncio.run(
            probe_alone(ssh, wrap, seconds, remote=True,
                        extra=lambda: ssh_processes(server.pid, server.port))
        )  # fmt: skip
        asyncio.run(ssh.close())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--viewers", type=int, default=20)
    parser.add_argument("--probe-seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="specdash-bench-telemetry-") as tmp:
        var = Path(tmp)
        with dashboard(var) as (url, env, serve), simulator(var) as sim_port:
            ids = json.loads(
                manage(env, "shell", "-c", SETUP.format(port=sim_port)).strip().splitlines()[-1]
            )
            serve_proc = psutil.Process(serve.pid)
            cpu_before = cpu_seconds(serve_proc)
            t0 = time.perf_counter()
            result = browser_run(url, ids["sweep"], args.viewers, args.seconds)
            serve_cpu = 100 * (cpu_seconds(serve_proc) - cpu_before) / (time.perf_counter() - t0)
        print(
            f"viewers: {args.viewers} on one sweep page (1 drawing page + "
            f"{args.viewers - 1} websockets), {args.seconds:g} s, GPU stream every 1000 ms"
        )
        print(f"  sample on the host -> point drawn in the browser: {summary(result['drawn'])}")
        print(f"  sample on the host -> message at the other viewers: {summary(result['raw'])}")
        rate = result["messages"] / max(1, args.viewers - 1) / args.seconds
        print(f"  batches per viewer per second: {rate:.2f}")
        print(
            f"  dashboard process (Daphne + worker + probes + {args.viewers} viewers): "
            f"{serve_cpu:.1f}% of one core"
        )
        target = pct(result["drawn"], 0.95)
        print(f"  target p95 < 300 ms: {'met' if target < 300 else 'NOT met'} ({target:.1f} ms)")
        costs = probe_costs(var, args.probe_seconds)
        for where, cost in costs.items():
            print(
                f"probe CPU per host ({where}, 8 GPUs, 1 s stream + host load): "
                f"{cost['in_process_pct']:.2f}% of a core in the dashboard process, "
                f"{cost['stream_processes_pct']:.2f}% in the stream processes "
                f"({cost['samples_per_s']:.2f} samples/s)"
            )


if __name__ == "__main__":
    main()
