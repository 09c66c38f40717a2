"""What a finished experiment costs to build and to show, at 1k to 1M requests per arm.

    .venv/bin/python -m perf.bench_scale [--sizes 1000,10000,100000] [--levels 8]
        [--linearity 10000] [--offload 100000] [--repeats 5] [--format compact|jsonl]
        [--modes full|answers|build] [--records-side 1000000]

Each size runs in a fresh child process with its own temporary SQLite database. Two arms
(a baseline and a speculative profile) each get one completed sweep of ``--levels`` levels
(C = 1, 2, 4, ...), the requests spread evenly over the levels. The records are synthetic (no
load is generated) but go through the project's own path: ``RequestRecord.to_json`` makes
each row (16 token chunks a request), the records writer stores it (``--format``: the compact
format by default, as a new sweep's), ``summarize_level`` summarises each level and
``sweep_level_finished`` stores it, as a real sweep does. Then, timed with the peak resident
memory of the process while each runs (sampled every 10 ms):

- the build at the experiment's end (``experiment_store_comparison``: comparison, schedule);
- every page and API answer of the finished experiment through Django's test client, p95 of
  ``--repeats`` (the comparison page, its CSV and report, the comparison and schedule API,
  the compare-sweeps page, CSV, report and API: their first answer builds and caches, the
  p95 is over the cached ones, and the first is printed too);
- ``audit --experiment`` (which rebuilds the comparison from the records by design).

``--linearity N`` repeats the build at N / 8 requests per level and arm over 4, 8 and 16
levels and prints the build time per request (flat when the cost is linear in levels).
``--records-side N`` times only what grows with the requests (each file read once into
columns, every per-request statistic of every level), at sizes whose setup (a summary of every
level, ~65 us of CPU a request) a shared machine cannot afford. ``--offload N`` builds an
N-request experiment the way the job worker does
(``builds.experiment_store_comparison_off_worker``) while another sweep's live samples are
stored every 0.25 s through the same shared sync thread, and prints the largest gap between
stored samples; then the same with the build on that thread (the old way).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import functools
import gc
import itertools
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
CHUNKS = 16
TOKENS = 128


class PeakRss:
    """The process's largest resident set size while the block runs (a 10 ms sampler)."""

    def __init__(self) -> None:
        self.process = psutil.Process()
        self.peak = 0
        self._stop = threading.Event()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            self._stop.wait(0.01)

    def __enter__(self) -> PeakRss:
        self.peak = self.process.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    with PeakRss() as rss:
        t0 = time.perf_counter()
        out = fn()
        elapsed = time.perf_counter() - t0
    return elapsed, rss.peak / 2**20, out


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


# -- the child: one size ---------------------------------------------------------------------


def _django(db: Path) -> None:
    os.environ["SPECDASH_DATABASE_URL"] = f"sqlite:///{db}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "specdash.settings")
    os.environ.setdefault("SPECDASH_ALLOWED_HOSTS", "testserver,localhost")
    # The experiment is created to hold synthetic sweeps; its job is never run.
    os.environ["SPECDASH_WORKER_REQUIRED"] = "0"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def _level_records(
    level: int, concurrency: int, requests: int, tok_s: float, seed: int
) -> list[Any]:
    from benchlib.loadgen.records import RequestRecord

    rng = random.Random(seed)
    clocks = [100.0] * concurrency
    mean = concurrency * TOKENS / tok_s
    out = []
    for i in range(requests):
        slot = i % concurrency
        start = clocks[slot]
        duration = mean * rng.uniform(0.8, 1.2)
        clocks[slot] = start + duration
        first = start + duration * 0.05
        step = (start + duration - first) / CHUNKS
        out.append(
            RequestRecord(
                request_id=f"l{level}-r{i}",
                slot=slot,
                start=start,
                end=start + duration,
                sent=start,
                written=start,
                first_token=first,
                chunk_times=[first + step * (k + 1) for k in range(CHUNKS)],
                chunk_tokens=[TOKENS // CHUNKS] * CHUNKS,
                output_tokens=TOKENS,
                prompt_tokens=200,
                finish_reason="length",
            )
        )
    return out


def _sweep(
    profile: Any,
    step: Any,
    levels: list[int],
    per_level: int,
    speed: float,
    tmp: Path,
    records_format: str,
) -> Any:
    from benchlib.loadgen.metrics import summarize_level
    from benchlib.loadgen.records import ClockAnchor, RequestRecord
    from benchlib.loadgen.recordstore import RecordWriter
    from benchmarks.sweeps.models import Sweep, SweepState
    from benchmarks.sweeps.recording import sweep_level_finished

    sweep = Sweep.objects.create(
        name=f"{profile.name} scale", profile=profile, levels=levels, state=SweepState.COMPLETED,
        experiment_step=step, attempts=1,
        environment={"instance": {"launch_argv": list(profile.launch_argv), "server_info": {}},
                     "profile": {"engine": profile.engine}},
    )  # fmt: skip
    suffix = ".sdrec" if records_format == "compact" else ".jsonl"
    path = tmp / f"records-{sweep.pk}{suffix}"
    anchor = ClockAnchor(t0_wall=1.7e9, t0_perf=0.0)
    writer = RecordWriter(path, append=False)
    try:
        for index, concurrency in enumerate(levels):
            tok_s = speed * 60.0 * concurrency**0.8
            records = _level_records(
                index, concurrency, per_level, tok_s, seed=sweep.pk * 1000 + index
            )
            lines = [record.to_json(anchor, level_index=index) for record in records]
            for line in lines:
                line["attempt"] = 1
                writer.write(line)
            # As the load generator summarises a level: from the records as stored (rounded).
            as_stored = [RequestRecord.from_json(line, anchor) for line in lines]
            summary = summarize_level(as_stored, concurrency=concurrency, anchor=anchor)
            summary.update(
                {"level_index": index, "status": "completed", "anchor": anchor.to_dict()}
            )
            sweep_level_finished(sweep_id=sweep.pk, summary=summary)
    finally:
        writer.close()
    sweep.records_path = str(path)
    sweep.save(update_fields=["records_path"])
    return sweep


def _experiment(requests: int, n_levels: int, tmp: Path, records_format: str) -> Any:
    from benchmarks.experiments import services
    from hosts.models import Host, HostKind, ServerProfile

    host, _ = Host.objects.get_or_create(name="local", kind=HostKind.LOCAL)
    argv = [sys.executable, "-m", "benchlib.simulator"]
    base = ServerProfile.objects.create(
        name="baseline", engine="simulator", host=host, launch_argv=argv, gpu_ids=[], port=9200
    )
    spec = ServerProfile.objects.create(
        name="eagle", engine="simulator", host=host, speculative=True,
        launch_argv=[*argv, "--speculative-num-steps", "3"], gpu_ids=[], port=9201,
    )  # fmt: skip
    # Doubling up to 128, then (for the 16-level run of the linearity check) on by 64 a
    # level: the engine's concurrency limit (4096) is never reached.
    levels = [2**i if i < 8 else 128 + 64 * (i - 7) for i in range(n_levels)]
    experiment = services.experiment_create(
        profiles=[base, spec], levels=levels, load={"requests_per_level": 5}, repeats=1
    )
    per_level = max(2, requests // n_levels)
    for step in experiment.steps.select_related("arm"):
        speed = 1.0 if step.arm.label == "A" else 1.15
        _sweep(step.arm.profile, step, levels, per_level, speed, tmp, records_format)
    return experiment


def _answers(experiment: Any, client: Any, repeats: int) -> list[dict[str, Any]]:
    from benchmarks.sweeps.models import Sweep

    pk = experiment.pk
    ids = list(
        Sweep.objects.filter(experiment_step__experiment=experiment)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    query = "&".join(f"sweeps={i}" for i in ids)
    api_query = "&".join(f"sweep={i}" for i in ids)
    urls = [
        ("experiment comparison page", f"/experiments/{pk}/comparison/"),
        ("experiment comparison CSV", f"/experiments/{pk}/comparison.csv"),
        ("experiment report", f"/experiments/{pk}/report.html"),
        ("comparison API", f"/api/v1/experiments/{pk}/comparison"),
        ("schedule API", f"/api/v1/experiments/{pk}/schedule"),
        ("compare-sweeps page", f"/compare/?{query}"),
        ("compare-sweeps CSV", f"/compare/table.csv?{query}"),
        ("compare-sweeps report", f"/compare/report.html?{query}"),
        ("compare-sweeps API", f"/api/v1/comparisons?{api_query}"),
    ]
    rows = []
    for name, url in urls:
        # The first answer pays the process's warm-up (imports, templates) and, for the
        # compare-sweeps answers, the build that is then cached: printed apart, not in the p95.
        first, _, response = _timed(functools.partial(client.get, url))
        assert response.status_code == 200, (url, response.status_code)
        times, peaks = [], []
        for _ in range(repeats):
            elapsed, peak, response = _timed(functools.partial(client.get, url))
            assert response.status_code == 200, (url, response.status_code)
            times.append(elapsed)
            peaks.append(peak)
        rows.append({"op": name, "p95_s": _p95(times), "first_s": first, "peak_mb": max(peaks)})
    return rows


async def _offload_gaps(experiment_id: int, sweep_id: int, off_worker: bool) -> dict[str, float]:
    from asgiref.sync import sync_to_async

    from benchmarks.experiments import builds, recording
    from benchmarks.sweeps.recording import sweep_samples_add

    stored: list[float] = []
    done = asyncio.Event()

    async def other_sweep() -> None:
        t = 0.0
        while not done.is_set():
            await sync_to_async(sweep_samples_add)(
                sweep_id=sweep_id,
                samples=[{"event": "sample", "level_index": 0, "t": t, "tok_s": 1.0}],
            )
            stored.append(time.perf_counter())
            t += 0.25
            await asyncio.sleep(0.25)

    ticker = asyncio.create_task(other_sweep())
    t0 = time.perf_counter()
    if off_worker:
        await builds.experiment_store_comparison_off_worker(experiment_id=experiment_id)
    else:
        await sync_to_async(recording.experiment_store_comparison)(experiment_id=experiment_id)
    build_s = time.perf_counter() - t0
    done.set()
    await ticker
    # From the build's start to its end: a build that stored no sample is one gap as long.
    gaps = [b - a for a, b in itertools.pairwise([t0, *stored, t0 + build_s])]
    return {
        "build_s": build_s,
        "max_gap_s": max(gaps) if gaps else math.inf,
        "samples": len(stored),
    }


def _release_memory() -> float:
    """Hand the setup's freed heap back to the system (it builds a level's records in memory,
    about 1 GB at 125k requests a level), so the peaks measured after it are the operations'
    own and not the setup's leftovers; the resident MB that remain."""
    gc.collect()
    # Not glibc: the peaks then include what the allocator kept.
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    rss: float = psutil.Process().memory_info().rss / 2**20
    return rss


def records_side(args: argparse.Namespace) -> None:
    """The part of the end-of-run build that grows with the requests, at sizes whose
    experiment setup (``summarize_level`` over every level, ~65 us of CPU a request) is too
    long for a shared machine: both arms' records written by the project's writer, then
    timed with the peak memory, each file read once into columns and every statistic the
    comparison takes over a level's requests (throughput, the batch-means spread of
    throughput and of the median TPOT, goodput points under an SLO). No database."""
    from benchlib.arrays.columns import read_record_columns
    from benchlib.loadgen.goodput import Slo
    from benchlib.loadgen.records import ClockAnchor
    from benchlib.loadgen.recordstore import RecordWriter
    from benchlib.stats import batch_means
    from benchmarks.experiments.decisions import tpot_statistic

    tmp = Path(tempfile.mkdtemp(prefix="specdash-scale-records-"))
    levels = [2**i for i in range(args.levels)]
    per_level = max(2, args.requests // args.levels)
    anchor = ClockAnchor(t0_wall=1.7e9, t0_perf=0.0)
    suffix = ".sdrec" if args.format == "compact" else ".jsonl"
    paths = []
    t0 = time.perf_counter()
    for arm, speed in enumerate((1.0, 1.15)):
        path = tmp / f"records-{arm}{suffix}"
        writer = RecordWriter(path, append=False)
        for index, concurrency in enumerate(levels):
            tok_s = speed * 60.0 * concurrency**0.8
            for record in _level_records(
                index, concurrency, per_level, tok_s, seed=arm * 1000 + index
            ):
                line = record.to_json(anchor, level_index=index)
                line["attempt"] = 1
                writer.write(line)
        writer.close()
        paths.append(path)
    setup_s = time.perf_counter() - t0
    rest_mb = _release_memory()
    slo = Slo(ttft_ms=500.0, tpot_ms=50.0)

    def analyse() -> int:
        blocks = 0
        for path in paths:
            columns = read_record_columns(path)
            for index in range(len(levels)):
                level = columns.levels[(index, 1)]
                requests = level.requests()
                requests.throughput()
                blocks += batch_means.log_block_spread(requests) is not None
                blocks += batch_means.log_block_spread(requests, tpot_statistic) is not None
                goodput = level.goodput_requests(slo)
                blocks += batch_means.log_block_spread(goodput) is not None
        return blocks

    analyse_s, analyse_mb, spreads = _timed(analyse)
    out = {
        "requests": args.requests,
        "levels": args.levels,
        "setup_s": setup_s,
        "rest_mb": rest_mb,
        "records_mb": sum(p.stat().st_size for p in paths) / 2**20,
        "analysis": {"s": analyse_s, "peak_mb": analyse_mb, "spreads": spreads},
    }
    print(json.dumps(out))


def child(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="specdash-scale-"))
    _django(tmp / "db.sqlite3")
    from django.contrib.auth.models import Group, User
    from django.test import Client

    from benchmarks import audit
    from benchmarks.experiments import recording
    from core.roles import VIEWERS

    t0 = time.perf_counter()
    experiment = _experiment(args.requests, args.levels, tmp, args.format)
    setup_s = time.perf_counter() - t0
    rest_mb = _release_memory()
    records_mb = sum(p.stat().st_size for p in tmp.glob("records-*")) / 2**20
    out: dict[str, Any] = {
        "requests": args.requests,
        "levels": args.levels,
        "setup_s": setup_s,
        # What the process holds before the measured operations (their peaks include it).
        "rest_mb": rest_mb,
        "records_mb": records_mb,
    }
    if args.mode == "offload":
        from benchmarks.sweeps.models import Sweep

        other = Sweep.objects.create(name="concurrent", levels=[1])
        for off_worker in (True, False):
            out["offload" if off_worker else "in_thread"] = asyncio.run(
                _offload_gaps(experiment.pk, other.pk, off_worker)
            )
        print(json.dumps(out))
        return
    build_s, build_mb, _ = _timed(
        lambda: recording.experiment_store_comparison(experiment_id=experiment.pk)
    )
    recording.experiment_finish(experiment_id=experiment.pk, state="completed")
    out["build"] = {"s": build_s, "peak_mb": build_mb}
    if args.mode in ("full", "answers"):
        user = User.objects.create_user("viewer")
        group, _ = Group.objects.get_or_create(name=VIEWERS)
        user.groups.add(group)
        client = Client()
        client.force_login(user)
        out["answers"] = _answers(experiment, client, args.repeats)
    if args.mode == "full":
        # What is measured so far, in case the audit (minutes at 1M) is stopped; the parent
        # reads the last line.
        print(json.dumps(out), flush=True)
        audit_s, audit_mb, report = _timed(lambda: audit.audit_experiment(experiment=experiment))
        out["audit"] = {
            "s": audit_s,
            "peak_mb": audit_mb,
            "ok": report.ok,
            "problems": report.problems[:5],
        }
    print(json.dumps(out))


# -- the parent: one child per size, then the table -----------------------------------------


def _run_child(
    requests: int, levels: int, mode: str, repeats: int, records_format: str
) -> dict[str, Any]:
    argv = [sys.executable, "-m", "perf.bench_scale", "--child", "--requests", str(requests),
            "--levels", str(levels), "--mode", mode, "--repeats", str(repeats),
            "--format", records_format]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{requests} requests: the child failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _table(results: list[dict[str, Any]], sizes: list[int], repeats: int) -> None:
    head = (
        f"| operation (s, p95 of {repeats}; peak RSS MB) | "
        + " | ".join(f"{n:,}" for n in sizes)
        + " |"
    )
    print(head)
    print("|---" * (len(sizes) + 1) + "|")

    def row(name: str, cells: list[str]) -> None:
        print(f"| {name} | " + " | ".join(cells) + " |")

    row("records files (both arms, MB)", [f"{r['records_mb']:.1f}" for r in results])
    row(
        "records bytes per request",
        [f"{r['records_mb'] * 2**20 / (2 * r['requests']):.0f}" for r in results],
    )
    row("synthetic setup (s)", [f"{r['setup_s']:.1f}" for r in results])
    row("resident after the setup (MB)", [f"{r['rest_mb']:.0f}" for r in results])
    row(
        "comparison + schedule built at the end",
        [f"{r['build']['s']:.2f}, {r['build']['peak_mb']:.0f} MB" for r in results],
    )
    for i, answer in enumerate(results[0].get("answers", [])):
        cells = []
        for r in results:
            a = r["answers"][i]
            first = f" (first {a['first_s']:.2f})"
            cells.append(f"{a['p95_s']:.3f}{first}, {a['peak_mb']:.0f} MB")
        row(answer["op"], cells)
    if all("audit" in r for r in results):
        row(
            "audit --experiment",
            [
                f"{r['audit']['s']:.2f}, {r['audit']['peak_mb']:.0f} MB, ok={r['audit']['ok']}"
                for r in results
            ],
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--levels", type=int, default=8)
    parser.add_argument("--linearity", type=int, default=10000, help="0: skip")
    parser.add_argument("--offload", type=int, default=100000, help="0: skip")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--format", choices=("compact", "jsonl"), default="compact", help="the records files'"
    )
    parser.add_argument(
        "--modes",
        default="full",
        choices=("full", "answers", "build"),
        help="full: the build, every answer and the audit; answers: no audit; build: the build",
    )
    parser.add_argument(
        "--records-side",
        default="",
        help="sizes (e.g. 1000000) at which to time only the records side of the build",
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=int, default=1000, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="full", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        records_side(args) if args.mode == "records" else child(args)
        return
    if args.records_side:
        # Each size's analysis as soon as it exists (the writing takes minutes at 1M).
        for n in [int(s) for s in args.records_side.split(",") if s]:
            r = _run_child(n, args.levels, "records", args.repeats, args.format)
            a = r["analysis"]
            print(
                f"records side of the build at {n:,} requests per arm ({args.format}, "
                f"{r['records_mb']:.1f} MB): {a['s']:.2f} s, "
                f"{a['s'] / (2 * n) * 1e6:.1f} us per request, peak {a['peak_mb']:.0f} MB "
                f"(resident before: {r['rest_mb']:.0f} MB; {a['spreads']} spreads)",
                flush=True,
            )
        return
    print(f"cores: {os.cpu_count()}; sizes are requests per arm, two arms, {args.levels} levels")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    results = []
    for n in sizes:
        # Each size's figures as soon as they exist: the larger sizes take many minutes.
        results.append(_run_child(n, args.levels, args.modes, args.repeats, args.format))
        print(json.dumps(results[-1]), flush=True)
    if results:
        _table(results, sizes, args.repeats)
    if args.linearity:
        # The same requests per level: twice the levels should cost twice, not four times.
        # Build time per request at 4, 8 and 16 levels: flat when the cost is linear.
        per_level = args.linearity // 8
        for n_levels in (4, 8, 16):
            r = _run_child(per_level * n_levels, n_levels, "build", args.repeats, args.format)
            b = r["build"]
            print(
                f"levels at {per_level:,} requests per level and arm: {n_levels} levels "
                f"build {b['s']:.2f} s, {b['s'] / (2 * per_level * n_levels) * 1e6:.1f} us "
                f"per request, peak {b['peak_mb']:.0f} MB"
            )
    if args.offload:
        o = _run_child(args.offload, args.levels, "offload", args.repeats, args.format)
        for key, label in (
            ("offload", "in a child process (the worker's way)"),
            ("in_thread", "on the shared sync thread (before)"),
        ):
            v = o[key]
            print(
                f"build of {args.offload:,} requests per arm {label}: {v['build_s']:.1f} s; "
                f"a concurrent sweep's samples every 0.25 s: {v['samples']} stored, "
                f"largest gap {v['max_gap_s']:.2f} s"
            )


if __name__ == "__main__":
    main()
