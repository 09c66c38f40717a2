"""Controller tracking on the simulator's SGLang adaptive mode under a rate ramp: the load
generator's fast reading of the tier gauge (every 50 ms) finds every switch of the draft-length
tier within 1 s of the simulator's own log of them (its controller log), the flaps out and back
shorter than a second included, and the per-second series costs each switch."""

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
from benchlib.loadgen.cli_args import build_parser
from benchlib.loadgen.events import EventWriter
from benchlib.stats.controller import hidden_between_scrapes, match_switches
from tests.fixtures.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
# K=3 alone and in small batches, K=1 from a (padded) batch of 8, drafting off from 16.
# The scrape's stamp trails the server's rendering of it by the answer's trip (milliseconds).
STAMP_SLACK_S = 0.05
TIER_FAMILY = "sglang:spec_num_steps"
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
    args = build_parser().parse_args(
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
    # (the scrape is stamped when its answer arrives, a few ms after the rendering): in the
    # per-second series and in the fast readings alike.
    for t, reading in zip(scrape_times, series["drafted_per_step"], strict=True):
        assert reading in {level_at(t - STAMP_SLACK_S), level_at(t)}, (t, reading)
    assert figures["switches_from"] == "tier_readings"
    fast = figures["tier_readings"]
    reading_times = [figures["opened_at"] + t for t in fast["t_s"]]
    for t, reading in zip(reading_times, fast["drafted_per_step"], strict=True):
        assert reading in {level_at(t - STAMP_SLACK_S), level_at(t)}, (t, reading)
    reading_gaps = [b - a for a, b in itertools.pairwise(reading_times)]
    assert statistics.mean(reading_gaps) < 0.075  # about one reading every 50 ms

    def inside(lo: float, hi: float) -> list[dict]:
        return [x for x in truth if lo - STAMP_SLACK_S < x["t"] <= hi]

    # Each detected switch lies between two readings that hold a true switch, and every true
    # switch is found but one of a flap out and back between two readings (50 ms apart).
    assert all(inside(*s["window"]) for s in switches)
    hidden = hidden_between_scrapes([(s["t"], s["from"], s["to"]) for s in truth], reading_times)
    for x in truth:
        if x["t"] not in hidden and reading_times[0] < x["t"] <= reading_times[-1]:
            assert any(x in inside(*s["window"]) for s in switches), x
    # The ramp makes the controller flap (the padded batch steps across 8 and back) for less
    # than a second, which once-a-second scrapes cannot show; the fast readings do.
    flaps = [(a, b) for a, b in itertools.pairwise(truth) if a["from"] == b["to"]]
    assert any(b["t"] - a["t"] < 1.0 for a, b in flaps)
    match = match_switches([s["t"] for s in switches], [s["t"] for s in truth], tolerance_s=1.0)
    if max(reading_gaps) <= 2.0:
        assert match.unmatched_detected == ()
        assert set(match.missed) <= set(hidden), (match, hidden)
    per_second_hidden = hidden_between_scrapes(
        [(s["t"], s["from"], s["to"]) for s in truth], scrape_times
    )
    assert not set(per_second_hidden) & set(match.missed)
    # Each detected switch is a real change of tier, and at least one is costed on both sides;
    # the switches of one episode (no whole second between them) carry its cost.
    assert all(s["before"] != s["after"] for s in switches)
    assert {s["before"] for s in switches} | {s["after"] for s in switches} <= {0.0, 1.0, 3.0}
    costed = [s for s in switches if s["throughput_change"] is not None]
    assert costed
    for s in costed:
        assert s["throughput_before"] > 0 and s["throughput_after"] > 0
    for s in switches:
        if s["episode_s"] is not None:
            lo, hi = s["episode_s"]
            assert lo <= s["t_s"] <= hi and s["episode_switches"] >= 2


def test_the_metrics_endpoint_answers_the_requested_families_only(
    adaptive_simulator: tuple[str, Path],
) -> None:
    # As prometheus_client (behind SGLang's /metrics) does with name[]: what the fast tier
    # reading asks for, a few hundred bytes instead of the whole exposition.
    url, _ = adaptive_simulator
    with urllib.request.urlopen(url + "/metrics?name[]=" + TIER_FAMILY, timeout=5) as r:
        text = r.read().decode()
    lines = text.splitlines()
    heads = (f"# HELP {TIER_FAMILY} ", f"# TYPE {TIER_FAMILY} ", TIER_FAMILY + "{")
    assert lines and all(line.startswith(heads) for line in lines), lines
    assert any(line.startswith(TIER_FAMILY + "{") for line in lines)
    with urllib.request.urlopen(url + "/metrics", timeout=5) as r:
        whole = r.read().decode()
    assert len(whole) > 10 * len(text) and "sglang:gen_throughput" in whole
