from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest

from benchlib.loadgen import cli
from benchlib.loadgen.arrivals import next_gap
from benchlib.loadgen.cli_args import build_parser
from benchlib.loadgen.events import EventWriter
from benchlib.loadgen.level_config import level_plan
from tests.benchlib.loadgen.stub_server import StubServer


@pytest.mark.parametrize(("burstiness", "cv"), [(1.0, 1.0), (0.25, 2.0), (4.0, 0.5)])
def test_arrival_gaps_keep_the_rate_and_have_the_burstiness_spread(
    burstiness: float, cv: float
) -> None:
    rng = random.Random(1)
    gaps = [next_gap(rng, 5.0, burstiness) for _ in range(40_000)]
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(1 / 5.0, rel=0.03)
    # gamma of shape B: coefficient of variation 1/sqrt(B) (1 for Poisson arrivals)
    assert statistics.pstdev(gaps) / mean == pytest.approx(cv, rel=0.05)


def test_level_plan_pairs_rates_with_concurrency() -> None:
    assert level_plan([1, 4], None) == [(1, None), (4, None)]
    assert level_plan([1, 4], [2.0]) == [(1, 2.0), (4, 2.0)]
    assert level_plan([16], [1.0, 2.0, 4.0]) == [(16, 1.0), (16, 2.0), (16, 4.0)]
    with pytest.raises(ValueError, match="as many rates"):
        level_plan([1, 2], [1.0, 2.0, 3.0])


async def test_a_rate_sweep_runs_one_level_per_rate(tmp_path: Path, stub: StubServer) -> None:
    out = tmp_path / "out.json"
    args = build_parser().parse_args(
        ["--base-url", stub.base_url, "--concurrency", "8", "--request-rate", "20,80",
         "--burstiness", "0.5", "--requests-per-level", "24", "--max-tokens", "4",
         "--prompt-set", "humaneval", "--output", str(out), "--quiet"]
    )  # fmt: skip
    code = await cli.run(args, EventWriter(None), None)
    assert code == cli.EXIT_OK
    levels = json.loads(out.read_text())["levels"]
    assert [(lv["concurrency"], lv["target_rate"], lv["mode"]) for lv in levels] == [
        (8, 20.0, "rate"),
        (8, 80.0, "rate"),
    ]
    assert all(lv["requests"]["ok"] == 24 for lv in levels)
    # 24 arrivals at 20/s take ~1.2 s, at 80/s ~0.3 s: the faster level ends sooner
    assert levels[1]["duration_s"] < levels[0]["duration_s"]
    assert levels[0]["acceptance"]["by_category"]["code"]["requests"] == 24
