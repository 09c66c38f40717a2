from __future__ import annotations

# What controller tracking's reads cost, on the client and on the server.
#
#     .venv/bin/python -m perf.bench_tier_reading [--seconds 20] [--tier-interval 0.05]
#
# Against an idle simulator in SGLang's adaptive mode (so its /metrics carries the tier gauge),
# three spans of the same length in this process: the fast tier reading alone (every
# --tier-interval, `name[]=sglang:spec_num_steps`), the per-second whole /metrics scrape
# alone, and nothing (the event loop asleep, the baseline). For each: this process's CPU
# seconds per wall second (getrusage, user + system) less the baseline's, the simulator's CPU
# seconds per second from /proc less its idle ones, the readings taken and the bytes of one
# answer (a span holds the other read's first and last too: two whole scrapes in the tier
# span, one tier reading in the whole one). The figures are printed; no target
# (docs/measurement.md, "Controller tracking").
import argparse
import asyncio
import json
import os
import resource
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from benchlib.loadgen.controller import ControllerTracker
from perf.bench_controller import TIERS
from perf.bench_loadgen import simulator

# A span that never comes within a measurement: the other read stays off.
NEVER_S = 3600.0


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _span(
    url: str, pid: int, seconds: float, interval_s: float, tier_interval_s: float
) -> dict[str, float]:
    tracker = None
    if interval_s < NEVER_S or tier_interval_s < NEVER_S:
        tracker = ControllerTracker(url, interval_s=interval_s, tier_interval_s=tier_interval_s)
    wall, own, server = time.monotonic(), _own_cpu(), _process_cpu(pid)
    if tracker is not None:
        tracker.start()
    await asyncio.sleep(seconds)
    if tracker is not None:
        await tracker.stop()
    wall = time.monotonic() - wall
    return {
        "own_cpu_per_s": (_own_cpu() - own) / wall,
        "server_cpu_per_s": (_process_cpu(pid) - server) / wall,
        "tier_readings": len(tracker.tiers) if tracker else 0,
        "scrapes": len(tracker.scrapes) if tracker else 0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--tier-interval", type=float, default=0.05)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tier-") as name:
        tmp = Path(name)
        tiers = tmp / "tiers.json"
        tiers.write_text(json.dumps(TIERS))
        flags = (
            "--speculative-adaptive", "--speculative-adaptive-config", str(tiers),
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        )  # fmt: skip
        with simulator("eagle3", tmp, None, *flags) as (base, _, pid):
            url = base + "/metrics"
            sizes: dict[str, int] = {}
            for label, query in (("tier", "?name[]=sglang:spec_num_steps"), ("whole", "")):
                with urllib.request.urlopen(url + query, timeout=5) as r:  # noqa: S310
                    sizes[label] = len(r.read())
            idle = asyncio.run(_span(url, pid, args.seconds, NEVER_S, NEVER_S))
            tier = asyncio.run(_span(url, pid, args.seconds, NEVER_S, args.tier_interval))
            whole = asyncio.run(_span(url, pid, args.seconds, 1.0, NEVER_S))
    for label, span, size, count in (
        (
            f"tier reading every {args.tier_interval * 1000:.0f} ms",
            tier,
            sizes["tier"],
            tier["tier_readings"],
        ),
        ("whole /metrics every 1 s", whole, sizes["whole"], whole["scrapes"]),
    ):
        print(
            f"{label}: client {(span['own_cpu_per_s'] - idle['own_cpu_per_s']) * 1000:.1f} ms "
            f"CPU per second, server "
            f"{(span['server_cpu_per_s'] - idle['server_cpu_per_s']) * 1000:.1f} ms CPU per "
            f"second; {count:.0f} readings in {args.seconds:g} s, "
            f"{size} bytes each"
        )
    print(
        f"idle: client {idle['own_cpu_per_s'] * 1000:.1f} ms, server "
        f"{idle['server_cpu_per_s'] * 1000:.1f} ms CPU per second"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
