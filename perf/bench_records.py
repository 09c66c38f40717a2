from __future__ import annotations

# What the load generator's records cost, measured against the simulator.
#
#     .venv/bin/python -m perf.bench_records [--requests 50000] [--max-tokens 32]
#
# 1. Peak RSS of a load generator process (`python -m benchlib.loadgen`, the process a sweep
#    runs) over one level of --requests requests at C=--concurrency, writing compact records:
#    its records go to the file as they complete and the level summary is read back from it.
# 2. Bytes per request on disk: that level's compact file against the same rows as JSON lines
#    (the format every run wrote before, and the records.jsonl users download), both printed,
#    and the rows of the two read back identical.
# 3. A SIGKILL in the middle of a level: the records on disk parse, each whole, and each one
#    matches the simulator's truth log of finished requests.
# Exit status 0 when every target passes, 1 otherwise.
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchlib.loadgen.recordstore import ReadState, iter_jsonl_bytes, iter_rows
from perf.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
RSS_TARGET_MB = 300.0
BYTES_RATIO_TARGET = 5.0  # compact bytes per request at most 1/5 of the JSON lines'
# Keys every record row has (RequestRecord.to_json): a row missing one was cut short.
ROW_KEYS = ("level", "id", "slot", "proc", "start", "end", "first_token", "chunks", "out")


@contextmanager
def simulator(tmp: Path, *, max_running: int = 1024) -> Iterator[tuple[str, Path]]:
    """The simulator (eagle3: several tokens per chunk; short steps) with a truth log."""
    truth = tmp / "truth.jsonl"
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchlib.simulator",
            "--port",
            str(port),
            "--profile",
            "eagle3",
            "--t0-ms",
            "2",
            "--k-ms",
            "0",
            "--max-running",
            str(max_running),
            "--http",
            "lean",
            "--truth-log",
            str(truth),
            "--workers",
            "0",
            "--state-dir",
            str(tmp / "state"),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError("the simulator exited")
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as r:  # noqa: S310
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the simulator did not become healthy")
            time.sleep(0.2)
        yield url, truth
    finally:
        proc.terminate()
        proc.wait(15)


def loadgen_argv(
    url: str, records: Path, *, requests: int, concurrency: int, max_tokens: int, run_id: str
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "benchlib.loadgen",
        "--base-url",
        url,
        "--model",
        "specdash-sim",
        "--concurrency",
        str(concurrency),
        "--requests-per-level",
        str(requests),
        "--max-tokens",
        str(max_tokens),
        "--ignore-eos",
        "--records",
        str(records),
        "--run-id",
        run_id,
        "--quiet",
    ]


def peak_rss(argv: list[str]) -> tuple[int, float, float]:
    """(exit status, peak RSS in MB, seconds) of a child process, from its own rusage."""
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 1024, time.monotonic() - t0


def read_truth(path: Path) -> dict[str, dict[str, Any]]:
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {r["request_id"]: r for r in rows}


def kill_mid_level(url: str, truth_path: Path, tmp: Path, *, at_rows: int = 400) -> dict[str, Any]:
    """Start a level, SIGKILL its load generator once `at_rows` records are on disk, and check
    what it left against the simulator's truth log. Returns the figures; raises on a defect."""
    records = tmp / "killed.sdrec"
    argv = loadgen_argv(
        url, records, requests=100_000, concurrency=32, max_tokens=32, run_id="killed"
    )
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while sum(1 for _ in _safe_rows(records)) < at_rows:
            if proc.poll() is not None:
                raise RuntimeError(f"the load generator exited early ({proc.returncode})")
            if time.monotonic() > deadline:
                raise RuntimeError("no records reached the disk")
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(30)
    killed_at = time.time()
    state = ReadState()
    rows = list(iter_rows(records, state=state))
    if not rows:
        raise AssertionError("no records survived the kill")
    for row in rows:
        missing = [k for k in ROW_KEYS if k not in row]
        if missing or not isinstance(row["chunks"], list):
            raise AssertionError(f"record {row.get('id')} is incomplete: {missing}")
    time.sleep(1.0)  # the simulator writes a request's truth line after its last chunk
    truth = read_truth(truth_path)
    finished = {
        rid: t
        for rid, t in truth.items()
        if rid.startswith("killed-") and t["finish_reason"] == "length" and t["finish"] < killed_at
    }
    for row in rows:
        t = finished.get(row["id"])
        if t is None:
            raise AssertionError(f"record {row['id']} is not a finished request of the truth log")
        if row["out"] != t["completion_tokens"] or [n for _, n in row["chunks"]] != [
            n for _, n in t["chunks"]
        ]:
            raise AssertionError(f"record {row['id']} differs from the truth log")
    return {
        "records_on_disk": len(rows),
        "finished_by_truth_log": len(finished),
        "lost": len(finished) - len(rows),
        "torn_tail": state.torn_tail,
    }


def _safe_rows(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists() or path.stat().st_size == 0:
        return iter(())
    return iter_rows(path, state=ReadState())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-records-") as tmp_name:
        tmp = Path(tmp_name)
        with simulator(tmp) as (url, truth):
            records = tmp / "level.sdrec"
            rc, rss_mb, seconds = peak_rss(
                loadgen_argv(
                    url,
                    records,
                    requests=args.requests,
                    concurrency=args.concurrency,
                    max_tokens=args.max_tokens,
                    run_id="rss",
                )
            )
            rows = sum(1 for _ in iter_rows(records))
            print(
                f"loadgen level: {args.requests} requests at C={args.concurrency}, "
                f"{args.max_tokens} tokens each, exit {rc}, {seconds:.0f} s, "
                f"{rows} records on disk"
            )
            passed = rc == 0 and rows == args.requests and rss_mb < RSS_TARGET_MB
            ok &= passed
            print(
                f"  peak RSS of the load generator process: {rss_mb:.0f} MB "
                f"(target < {RSS_TARGET_MB:.0f} MB) {'PASS' if passed else 'FAIL'}"
            )

            compact = records.stat().st_size
            jsonl = tmp / "level.jsonl"
            with jsonl.open("wb") as f:
                for chunk in iter_jsonl_bytes(records):
                    f.write(chunk)
            same = all(a == b for a, b in zip(iter_rows(records), iter_rows(jsonl), strict=True))
            old, new = jsonl.stat().st_size / rows, compact / rows
            passed = same and old / new >= BYTES_RATIO_TARGET
            ok &= passed
            print(
                f"  bytes per request: JSON lines {old:.0f}, compact {new:.0f} "
                f"({old / new:.1f}x smaller, target >= {BYTES_RATIO_TARGET:.0f}x), "
                f"rows identical both ways: {same} {'PASS' if passed else 'FAIL'}"
            )

            try:
                figures = kill_mid_level(url, truth, tmp)
                print(
                    f"SIGKILL mid-level: {figures['records_on_disk']} records on disk, each "
                    f"whole and equal to its truth-log line; {figures['finished_by_truth_log']} "
                    f"finished by the truth log before the kill ({figures['lost']} lost in the "
                    f"last unflushed batch); torn tail: {figures['torn_tail']} PASS"
                )
            except (AssertionError, RuntimeError) as exc:
                ok = False
                print(f"SIGKILL mid-level: FAIL: {exc}")
    print("ALL PASS" if ok else "SOME FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
