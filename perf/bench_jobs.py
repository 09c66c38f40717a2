"""How many concurrent sweeps one job-worker process drives before its measurements degrade,
and what a second worker process adds.

    .venv/bin/python -m perf.bench_jobs [--sweeps 1,2,4,8] [--workers 1,2]
        [--database-url postgres://...] [--duration 4] [--concurrency 2]

For every (workers, sweeps) pair: K sweeps of one level (C streams for ``--duration`` s each)
against one simulator (``fast`` profile) are queued at once and run by W ``jobworker``-like
child processes, each of which also samples its own event-loop lag (a 50 ms sleep that
overshoots is time the loop could not run a job). Reported per run: output tok/s per sweep
(median, min) and relative to a lone sweep, how many sweeps' load generators reported
themselves client-limited, the workers' loop lag (p99, max), the slowest claim (queued to
running) and the total output tok/s. A run is "degraded" when a load generator reports
itself client-limited, a worker's loop lag p99 exceeds 250 ms or a sweep does not complete.
Per-sweep tok/s relative to a lone sweep is printed but not judged: the sweeps share one
server, whose batch model (and CPU) divides its throughput between them. Each sweep has its
own load-generator process, so on a small machine the CPU those processes and the simulator
need is part of what is measured (the first line names the cores).
Default database: a temporary SQLite file (``--database-url`` for PostgreSQL).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from perf.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
MODEL = "specdash-sim"
LAG_PROBE_S = 0.05
# Worker loop lag beyond a quarter of the 1 s sample batch makes live charts visibly stutter
# (the measurements themselves are taken in the load-generator processes).
DEGRADED_LAG_MS = 250.0


def _quantile(values: list[float], q: float) -> float | None:
    # Nearest rank (upper), not the load generator's interpolation: the figure is a lag the
    # worker loop was actually seen to have, comparable with those docs/operations.md records.
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the child: one worker process plus a loop-lag probe ------------------------------------


async def _child(worker_id: str, stats_file: Path) -> None:
    from core.jobs.worker import Worker, WorkerSettings

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    lags: list[float] = []

    async def probe() -> None:
        while not stop.is_set():
            t0 = loop.time()
            await asyncio.sleep(LAG_PROBE_S)
            lags.append(max(0.0, loop.time() - t0 - LAG_PROBE_S) * 1000)

    worker = Worker(worker_id=worker_id, settings=WorkerSettings(poll_interval=0.2))
    probe_task = asyncio.create_task(probe())
    await worker.run(stop)
    probe_task.cancel()
    stats = {
        "worker_id": worker_id,
        "lag_p99_ms": _quantile(lags, 0.99),
        "lag_max_ms": max(lags, default=None),
        "lag_samples": len(lags),
    }
    await asyncio.to_thread(stats_file.write_text, json.dumps(stats))


def child_main(worker_id: str, stats_file: Path) -> None:
    import django

    django.setup()
    asyncio.run(_child(worker_id, stats_file))


# -- the parent ------------------------------------------------------------------------------


def _start_simulator(tmp: Path, workers: int, profile: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "benchlib.simulator",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--profile",
        profile,
        "--workers",
        str(workers),
        "--model",
        MODEL,
        "--state-dir",
        str(tmp / "gpu"),
    ]
    log = (tmp / "simulator.log").open("wb")
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with (
            contextlib.suppress(OSError),
            # SGLang-style /health answers after ~1 s (it waits for a generation).
            urllib.request.urlopen(url + "/health", timeout=5) as response,  # noqa: S310
        ):
            if response.status == 200:
                return proc, url
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("simulator did not start")


def _run(
    *, sweeps: int, workers: int, base_url: str, args: argparse.Namespace, tmp: Path
) -> dict[str, Any]:
    from benchmarks.sweeps import services
    from benchmarks.sweeps.models import Sweep, SweepLevel

    load = {
        "api": "completions",
        "duration": args.duration,
        "max_tokens": args.max_tokens,
        "input_tokens": 32,
        "ignore_eos": True,
        "model": MODEL,
    }
    children = []
    stats_files = []
    for i in range(workers):
        stats = tmp / f"worker-{sweeps}-{workers}-{i}.json"
        stats_files.append(stats)
        children.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "perf.bench_jobs",
                    "--child-worker",
                    f"bench-w{i}",
                    str(stats),
                ],
                cwd=ROOT,
                env=os.environ.copy(),
            )
        )
    time.sleep(2.0)  # let the workers import Django and start polling before the burst
    created = [
        services.sweep_create(
            base_url=base_url,
            levels=[args.concurrency],
            load=load,
            name=f"bench {sweeps}x{workers} #{k}",
        )
        for k in range(sweeps)
    ]
    ids = [s.pk for s in created]
    deadline = time.monotonic() + 120 + args.duration * 4
    while Sweep.objects.filter(pk__in=ids, finished_at__isnull=True).exists():
        if time.monotonic() > deadline:
            raise RuntimeError("sweeps did not finish in time")
        time.sleep(0.3)
    for child in children:
        child.send_signal(signal.SIGTERM)
    for child in children:
        child.wait(timeout=60)
    rows = {s.pk: s for s in Sweep.objects.filter(pk__in=ids)}
    levels = list(SweepLevel.objects.filter(sweep_id__in=ids))
    tok_s = [lv.output_tok_s or 0.0 for lv in levels]
    limited = sum(1 for lv in levels if (lv.summary.get("client") or {}).get("client_limited"))
    claims = [(s.started_at - s.created_at).total_seconds() for s in rows.values() if s.started_at]
    worker_stats = [json.loads(f.read_text()) for f in stats_files if f.exists()]
    owners = {
        s.job.worker_id
        for s in Sweep.objects.filter(pk__in=ids).select_related("job")
        if s.job is not None
    }
    return {
        "workers": workers,
        "sweeps": sweeps,
        "completed": sum(1 for s in rows.values() if s.state == "completed"),
        "tok_s_median": statistics.median(tok_s) if tok_s else None,
        "tok_s_min": min(tok_s) if tok_s else None,
        "tok_s_total": sum(tok_s),
        "client_limited": limited,
        "lag_p99_ms": max((w["lag_p99_ms"] or 0.0 for w in worker_stats), default=None),
        "lag_max_ms": max((w["lag_max_ms"] or 0.0 for w in worker_stats), default=None),
        "claim_max_s": max(claims, default=None),
        "workers_used": len(owners),
    }


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m perf.bench_jobs")
    parser.add_argument("--sweeps", default="1,2,4,8", help="concurrent sweeps per run")
    parser.add_argument("--workers", default="1,2", help="worker processes per run")
    parser.add_argument("--concurrency", type=int, default=2, help="streams per sweep")
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per sweep level")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--profile", default="fast", help="simulator profile")
    parser.add_argument("--sim-workers", type=int, default=0, help="simulator worker processes")
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument(
        "--child-worker", nargs=2, metavar=("WORKER_ID", "STATS_FILE"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "specdash.settings")
    if args.child_worker:
        child_main(args.child_worker[0], Path(args.child_worker[1]))
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="bench-jobs-"))
    os.environ["SPECDASH_VAR_DIR"] = str(tmp)
    os.environ["SPECDASH_DATA_DIR"] = str(tmp / "data")
    os.environ.setdefault("SPECDASH_LOG_LEVEL", "WARNING")
    # One load-generator process per sweep: the plain (unsplit) path.
    os.environ.pop("SPECDASH_LOADGEN_MAX_STREAMS", None)
    if args.database_url:
        os.environ["SPECDASH_DATABASE_URL"] = args.database_url
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", "--no-input", verbosity=0)
    from hosts.models import Host, HostKind

    # The simulator runs here: a registered local host makes loopback a sweep target.
    Host.objects.get_or_create(name="local", kind=HostKind.LOCAL)
    sim, base_url = _start_simulator(tmp, args.sim_workers, args.profile)
    results = []
    try:
        print(
            f"cores: {os.cpu_count()}, database: {args.database_url or 'sqlite'}, "
            f"C={args.concurrency} per sweep, {args.duration:g} s level, "
            f"simulator profile {args.profile}"
        )
        print(
            f"{'W':>2} {'K':>3} {'done':>4} {'tok/s med':>9} {'min':>7} {'vs 1':>5} "
            f"{'total':>8} {'limited':>7} {'lag p99':>8} {'lag max':>8} {'claim':>6} {'used':>4}"
            "  verdict"
        )
        lone: float | None = None
        for workers in [int(w) for w in args.workers.split(",")]:
            for sweeps in [int(k) for k in args.sweeps.split(",")]:
                row = _run(sweeps=sweeps, workers=workers, base_url=base_url, args=args, tmp=tmp)
                if lone is None and sweeps == 1:
                    lone = row["tok_s_median"]
                ratio = row["tok_s_min"] / lone if lone and row["tok_s_min"] is not None else None
                # Per-sweep tok/s against a lone sweep is shown, not judged: the simulator's
                # batch model (and, with `fast`, its CPU) shares the server between sweeps.
                degraded = (
                    row["client_limited"] > 0
                    or (row["lag_p99_ms"] or 0.0) > DEGRADED_LAG_MS
                    or row["completed"] < sweeps
                )
                row["ratio_to_lone"] = ratio
                row["degraded"] = degraded
                results.append(row)
                print(
                    f"{workers:>2} {sweeps:>3} {row['completed']:>4} "
                    f"{_fmt(row['tok_s_median'], '9.1f')} {_fmt(row['tok_s_min'], '7.1f')} "
                    f"{_fmt(ratio, '5.2f')} {row['tok_s_total']:>8.1f} {row['client_limited']:>7} "
                    f"{_fmt(row['lag_p99_ms'], '8.1f')} {_fmt(row['lag_max_ms'], '8.1f')} "
                    f"{_fmt(row['claim_max_s'], '6.2f')} {row['workers_used']:>4}  "
                    f"{'DEGRADED' if degraded else 'ok'}",
                    flush=True,
                )
    finally:
        sim.kill()
        sim.wait(timeout=10)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
