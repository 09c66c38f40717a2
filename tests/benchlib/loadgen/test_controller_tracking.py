"""Controller tracking on the simulator's SGLang adaptive mode under a rate ramp: the load
generator's per-second /metrics scrape finds every switch of the draft-length tier within
1 s of the simulator's own log of them (its controller log), and costs each switch."""

from __future__ import annotations

import itertools
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchlib.loadgen import cli
from benchlib.loadgen.events import EventWriter
from benchlib.stats.controller import hidden_between_scrapes, match_switches
from tests.fixtures.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
# K=3 alone and in small batches, K=1 from a (padded) batch of 8, drafting off from 16.
# The scrape's stamp trails the server's rendering of it by the answer's trip (milliseconds).
STAMP_SLACK_S = 0.05
TIERS = {
    "1": {"candidate_steps": [3]},
    "8": {"candidate_steps": [1]},
    "16": {"candidate_steps": [0]},
}


@pytest.fixture
def adaptive_simulator(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    tiers = tmp_path / "tiers.json"
    tiers.write_text(json.dumps(TIERS))
    log = tmp_path / "controller.jsonl"
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1", "--port", str(port),
         "--profile", "eagle3", "--speculative-adaptive", "--speculative-adaptive-config",
         str(tiers), "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
         "--controller-log", str(log), "--seed", "7", "--workers", "0",
         "--state-dir", str(tmp_path / "state")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, "simulator exited"
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "simulator not healthy"
        time.sleep(0.1)
    try:
        yield url, log
    finally:
        proc.terminate()
        proc.wait(10)


async def test_every_tier_switch_under_a_rate_ramp_is_found_within_a_second_and_costed(
    adaptive_simulator: tuple[str, Path], tmp_path: Path
) -> None:
    url, log = adaptive_simulator
    out = tmp_path / "out.json"
    args = cli.build_parser().parse_args(
        ["--base-url", url, "--concurrency", "64", "--request-rate", "40", "--ramp", "linear",
         "--ramp-start-rate", "2", "--requests-per-level", "150", "--max-tokens", "60",
         "--ignore-eos", "--controller-tracking", "--output", str(out), "--quiet"]
    )  # fmt: skip
    assert await cli.run(args, EventWriter(None), None) == cli.EXIT_OK
    level = json.loads(out.read_text())["levels"][0]
    figures = level["controller"]
    assert figures["source"] == "sglang_gauges" and figures["failed_scrapes"] == 0
    series = figures["series"]
    scrape_times = [figures["opened_at"] + t for t in series["t_s"]]
    gaps = [b - a for a, b in itertools.pairwise(scrape_times)]
    assert len(gaps) >= 8 and statistics.mean(gaps) < 1.1  # about one point a second

    truth = [json.loads(line) for line in log.read_text().splitlines()]
    # The ramp crossed both thresholds, up (3 -> 1 -> 0) and back down while draining.
    assert {(s["from"], s["to"]) for s in truth} >= {(3, 1), (1, 0), (0, 1), (1, 3)}
    switches = figures["switches"]

    def level_at(t: float) -> int:
        before = [x for x in truth if x["t"] <= t]
        return int(before[-1]["to"] if before else truth[0]["from"])

    # Each reading of the tier gauge is the tier the simulator ran when it rendered the scrape
    # (the scrape is stamped when its answer arrives, a few ms after the rendering).
    for t, reading in zip(scrape_times, series["drafted_per_step"], strict=True):
        assert reading in {level_at(t - STAMP_SLACK_S), level_at(t)}, (t, reading)

    def inside(lo: float, hi: float) -> list[dict]:
        return [x for x in truth if lo - STAMP_SLACK_S < x["t"] <= hi]

    # Each detected switch lies between two scrapes that hold a true switch, and every true
    # switch is found, but for a flap out and back between two scrapes, which leaves both
    # reading the same tier: the one thing a once-a-second gauge cannot show.
    assert all(inside(*s["window"]) for s in switches)
    hidden = hidden_between_scrapes([(s["t"], s["from"], s["to"]) for s in truth], scrape_times)
    for x in truth:
        if x["t"] not in hidden and scrape_times[0] < x["t"] <= scrape_times[-1]:
            assert any(x in inside(*s["window"]) for s in switches), x
    # Placed in the middle of its interval: within 1 s of the true time wherever the scrapes
    # kept an interval of 2 s or less (a starved event loop stretches it).
    match = match_switches([s["t"] for s in switches], [s["t"] for s in truth], tolerance_s=1.0)
    if max(gaps) <= 2.0:
        assert match.unmatched_detected == ()
        assert set(match.missed) <= set(hidden), (match, hidden)
    # Each detected switch is a real change of tier, and at least one is costed on both sides.
    assert all(s["before"] != s["after"] for s in switches)
    assert {s["before"] for s in switches} | {s["after"] for s in switches} <= {0.0, 1.0, 3.0}
    costed = [s for s in switches if s["throughput_change"] is not None]
    assert costed
    for s in costed:
        assert s["throughput_before"] > 0 and s["throughput_after"] > 0
