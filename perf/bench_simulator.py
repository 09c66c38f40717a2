from __future__ import annotations

# Sweeps the simulator's built-in profiles with a closed-loop raw-asyncio client and prints the
# measured aggregate output tok/s beside the model's prediction and the scenario's figures, then
# the fast profile's SSE chunk emission capacity with the server pinned to one core.
#
#     .venv/bin/python -m perf.bench_simulator [--quick]
#     .venv/bin/python -m perf.bench_simulator --schedule   # the preview alone
#
# It ends with the load-adaptive preview (benchlib/simulator/preview.py, virtual clock, a few
# seconds): fixed draft lengths, the schedule derived from them, and that schedule run.
#
# Each level starts from an idle server; throughput is counted over whole decode steps after
# every slot has its first token (ramp-up excluded). On a shared machine the figures are noisy.
import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from benchlib.simulator import preview
from benchlib.simulator.model import predict_closed_loop
from benchlib.simulator.profiles import PROFILES

ROOT = Path(__file__).resolve().parents[1]
LEVELS = (1, 2, 5, 10, 30, 70, 100, 250)
PROMPT_CHARS = 128  # ~32 prompt tokens
MAX_TOKENS = 256
# Figures from the real tuning effort (reference scenario): aggregate output tok/s per level.
SCENARIO: dict[str, dict[int, str]] = {
    "baseline": {1: "92.6*", 250: "~773"},
    "eagle3": {
        1: "77.5 (96.1*)",
        2: "125.1",
        5: "183.2",
        30: "299.5",
        70: "337.7",
        100: "~340",
        250: "340-354",
    },
}
_USAGE_KEY = b'"completion_tokens":'


@dataclass
class ClientStats:
    """Per-chunk arrivals recorded by the closed-loop client (perf_counter seconds)."""

    times: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    events: int = 0
    requests: int = 0
    errors: list[str] = field(default_factory=list)


def _completion_tokens(data: bytes) -> int | None:
    at = data.rfind(_USAGE_KEY)
    if at < 0:
        return None
    start = at + len(_USAGE_KEY)
    end = start
    while end < len(data) and 48 <= data[end] <= 57:
        end += 1
    return int(data[start:end]) if end > start else None


async def _stream_once(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes, stats: ClientStats
) -> None:
    writer.write(request)
    status = await reader.readline()
    if not status.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"bad status {status!r}")
    while (await reader.readline()) not in (b"\r\n", b""):
        pass
    seen = 0
    times, tokens = stats.times, stats.tokens
    while True:
        size = int((await reader.readline()).strip(), 16)
        if size == 0:
            await reader.readline()
            break
        data = await reader.readexactly(size + 2)
        now = time.perf_counter()
        stats.events += data.count(b"data: ")
        cumulative = _completion_tokens(data)
        if cumulative is not None and cumulative > seen:
            times.append(now)
            tokens.append(cumulative - seen)
            seen = cumulative
    stats.requests += 1


async def closed_loop_slot(
    host: str, port: int, body: bytes, stats: ClientStats, stop: asyncio.Event
) -> None:
    """One client slot: a keep-alive connection sending the next request when one ends."""
    request = (
        b"POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    ) + body
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
    try:
        while not stop.is_set():
            await _stream_once(reader, writer, request, stats)
    except (OSError, RuntimeError, ValueError, asyncio.IncompleteReadError) as exc:
        stats.errors.append(repr(exc))
    finally:
        writer.close()


async def run_level(
    host: str, port: int, body: bytes, concurrency: int, seconds: float
) -> ClientStats:
    stats = ClientStats()
    stop = asyncio.Event()
    tasks = [
        asyncio.ensure_future(closed_loop_slot(host, port, body, stats, stop))
        for _ in range(concurrency)
    ]
    await asyncio.sleep(seconds)
    stop.set()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return stats


def _window_rate(stats: ClientStats, concurrency: int, step_s: float) -> tuple[float, float]:
    """Tokens/s over whole steps after the ramp-up, and the window's length."""
    if not stats.times:
        return 0.0, 0.0
    order = sorted(range(len(stats.times)), key=stats.times.__getitem__)
    times = [stats.times[i] for i in order]
    tokens = [stats.tokens[i] for i in order]
    # Ramp-up ends when every slot has been served once: skip the first C chunks' step.
    start_index = min(len(times) - 1, concurrency - 1)
    t_start = times[start_index]
    # A step's chunks leave within a fraction of a step: anything later belongs to the next one.
    guard = min(0.3 * step_s, 0.05)
    counted = sum(n for t, n in zip(times, tokens, strict=True) if t > t_start + guard)
    window = times[-1] - t_start
    return (counted / window if window > 0 else 0.0), window


def _pin_self(core: int) -> None:
    with contextlib.suppress(AttributeError, OSError):
        if len(os.sched_getaffinity(0)) > 1:
            os.sched_setaffinity(0, {core})


@dataclass
class SimProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    truth: Path
    extra: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_simulator(tmp: Path, name: str, args: list[str], *, pin: bool) -> SimProcess:
    log, truth = tmp / f"{name}.log", tmp / f"{name}.truth.jsonl"
    argv = [sys.executable, "-m", "benchlib.simulator", "--port", "0", "--workers", "0"]
    argv += ["--state-dir", str(tmp / "state"), "--truth-log", str(truth), *args]
    if pin and shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        argv = ["taskset", "-c", "0", *argv]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "ready to roll" in text:
            match = re.search(r"bound to http://[\d.]+:(\d+)", text)
            assert match is not None
            return SimProcess(proc, int(match.group(1)), log, truth)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"simulator did not start:\n{log.read_text(errors='replace')}")


def _running(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith("sglang:num_running_reqs{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _wait_idle(port: int) -> None:
    deadline = time.monotonic() + 15
    while _running(port) > 0 and time.monotonic() < deadline:
        time.sleep(0.1)


def _body(max_tokens: int) -> bytes:
    return json.dumps(
        {
            "prompt": "x" * PROMPT_CHARS,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
    ).encode()


def sweep_profile(tmp: Path, name: str, *, quick: bool) -> list[tuple[str, ...]]:
    profile = PROFILES[name]
    sim = start_simulator(tmp, name, ["--profile", name], pin=True)
    rows: list[tuple[str, ...]] = []
    try:
        for c in LEVELS:
            pred = predict_closed_loop(
                profile, c, prompt_tokens=PROMPT_CHARS // 4, output_tokens=MAX_TOKENS
            )
            min_window = 3.0 if quick else 8.0
            ramp = pred.step_seconds * 1.5 + c * profile.prefill_seconds(PROMPT_CHARS // 4)
            seconds = ramp + max(min_window, 4 * pred.step_seconds)
            stats = asyncio.run(run_level("127.0.0.1", sim.port, _body(MAX_TOKENS), c, seconds))
            rate, window = _window_rate(stats, c, pred.step_seconds)
            _wait_idle(sim.port)
            scenario = SCENARIO.get(name, {}).get(c, "")
            ratio = f"{rate / pred.output_tok_s:.3f}" if pred.output_tok_s else ""
            rows.append(
                (
                    name,
                    str(c),
                    f"{rate:.1f}",
                    f"{pred.output_tok_s:.1f}",
                    ratio,
                    scenario,
                    f"{window:.1f}",
                    str(len(stats.errors)),
                )
            )
            print("  " + "  ".join(rows[-1]), flush=True)
    finally:
        sim.stop()
    return rows


def fast_capacity(tmp: Path, *, quick: bool) -> list[tuple[str, str]]:
    sim = start_simulator(tmp, "fast", ["--profile", "fast"], pin=True)
    seconds = 4.0 if quick else 8.0
    results: list[tuple[str, str]] = []
    try:
        for c in (32,):
            t0 = time.time()
            stats = asyncio.run(run_level("127.0.0.1", sim.port, _body(20000), c, seconds))
            t1 = time.time()
            time.sleep(0.5)
            emitted = 0
            lo, hi = t0 + 1.0, t1 - 0.2
            for line in sim.truth.read_text().splitlines():
                for t, _n in json.loads(line)["chunks"]:
                    emitted += lo <= t < hi
            client_rate = stats.events / seconds
            results.append((f"C={c} server chunks/s (truth log)", f"{emitted / (hi - lo):,.0f}"))
            results.append((f"C={c} client events/s received", f"{client_rate:,.0f}"))
    finally:
        sim.stop()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description="Sweep the simulator profiles.")
    parser.add_argument("--quick", action="store_true", help="shorter levels (about a minute)")
    parser.add_argument("--profiles", default="baseline,eagle3", help="comma-separated profiles")
    parser.add_argument("--no-fast", action="store_true", help="skip the chunk-capacity check")
    parser.add_argument(
        "--schedule", action="store_true", help="only the load-adaptive preview (virtual clock)"
    )
    args = parser.parse_args()
    if args.schedule:
        print_schedule_preview()
        return 0
    _pin_self(1)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="specdash-bench-sim-"))
    header = ("profile", "C", "measured", "predicted", "ratio", "scenario", "window_s", "errors")
    print(
        f"Closed-loop sweep: prompt ~{PROMPT_CHARS // 4} tokens, {MAX_TOKENS} output tokens "
        "(ignore_eos), aggregate output tok/s; * = single-stream decode figure"
    )
    print("  " + "  ".join(header), flush=True)
    rows: list[tuple[str, ...]] = []
    try:
        for name in args.profiles.split(","):
            rows += sweep_profile(tmp, name.strip(), quick=args.quick)
        capacity = [] if args.no_fast else fast_capacity(tmp, quick=args.quick)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print("\nSummary")
    for row in [header, *rows]:
        print("  " + "  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)))
    if capacity:
        print("\nfast profile, server pinned to core 0, client to core 1 (target >= 20,000/s)")
        for label, value in capacity:
            print(f"  {label:<36} {value:>10}")
    print_schedule_preview()
    print(f"\ntotal {time.monotonic() - started:.0f} s (shared machine: figures are noisy)")
    return 0


def print_schedule_preview() -> None:
    print(
        "\nLoad-adaptive preview, eagle3 profile (virtual clock, mean of 3 seeds, 32 -> 256 "
        "tokens): fixed draft lengths, the derived schedule read back from its SGLang argv"
    )
    for line in preview.table(preview.preview()):
        print(line, flush=True)


if __name__ == "__main__":
    sys.exit(main())
