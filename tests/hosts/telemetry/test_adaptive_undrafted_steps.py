"""SGLang's accept length over a level is (generated - requests) / verify calls, which assumes
every decode step drafts. With ``--speculative-adaptive`` and a tier whose ``candidate_steps``
is ``[0]`` (the schedule specdash writes, and SGLang's own default from batch 64), the steps
that draft nothing are verify calls too: the counters still give tokens per engine step, but
no accept length per drafted step. Checked on the SGLang-shaped simulator against its truth
log (each request's decode steps as runs of [batch, K, steps])."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from benchlib.simulator.app import SimApp
from benchlib.simulator.cli import parse_config
from benchmarks.experiments import workload
from benchmarks.experiments.level_runs import LevelRun
from benchmarks.sweeps.recording import undrafted_steps
from hosts.telemetry.levels import UNDRAFTED_STEPS_REASON, ServerMetrics, level_server_metrics
from hosts.telemetry.prometheus import parse_engine_metrics
from tests.benchlib.simulator.conftest import call
from tests.benchlib.simulator.test_adaptive_serving import SCHEDULE, engine_argv

BODY = {"prompt": "hi", "max_tokens": 40, "ignore_eos": True, "stream": True}


async def _level(tmp_path: Path) -> tuple[ServerMetrics, ServerMetrics, list[dict[str, Any]]]:
    """A level on an adaptive SGLang-shaped server (K=3 up to batch 2, none above): two
    requests alone (drafting), then four together (batch 4: no drafting). Returns the figures
    without and with ``undrafted_steps``, and the truth log's lines."""
    truth = tmp_path / "truth.jsonl"
    argv = [*engine_argv("SGLang", SCHEDULE, tmp_path), "--truth-log", str(truth), "--seed", "5"]
    app = SimApp(parse_config([*argv, "--disable-cuda-graph-padding"]))
    info = (await call(app, "GET", "/server_info")).json()
    assert undrafted_steps({"instance": {"server_info": info}}) is True
    before = (await call(app, "GET", "/metrics")).body.decode()
    for _ in range(2):
        await call(app, "POST", "/v1/completions", BODY)
    await asyncio.gather(*(call(app, "POST", "/v1/completions", BODY) for _ in range(4)))
    after = (await call(app, "GET", "/metrics")).body.decode()
    app.truth.close()
    scrapes = (
        parse_engine_metrics(before, scraped_at=1.0),
        parse_engine_metrics(after, scraped_at=2.0),
    )
    plain = level_server_metrics(*scrapes)
    flagged = level_server_metrics(*scrapes, undrafted_steps=True)
    rows = [json.loads(line) for line in truth.read_text().splitlines()]
    return plain, flagged, rows


async def test_undrafted_steps_leave_tokens_per_step_and_no_accept_length_per_drafted_step(
    tmp_path: Path,
) -> None:
    plain, flagged, rows = await _level(tmp_path)
    assert len(rows) == 6
    runs = [run for row in rows for run in row["decode_steps"]]
    steps = sum(count for _, _, count in runs)
    drafted_steps = sum(count for _, k, count in runs if k > 0)
    undrafted = steps - drafted_steps
    assert drafted_steps > 0 and undrafted > 0  # both kinds of step in this level
    decoded = sum(row["completion_tokens"] - 1 for row in rows)
    # A step that drafts nothing yields exactly one token.
    truth_per_step = decoded / steps
    truth_per_drafted_step = (decoded - undrafted) / drafted_steps

    # The counters' figure is tokens per engine step, whatever the tier.
    assert plain["tokens_per_step"] == pytest.approx(truth_per_step, rel=0.02)
    assert flagged["tokens_per_step"] == pytest.approx(truth_per_step, rel=0.02)
    assert flagged["tokens_per_step_source"] == "verify_counters"
    # Unflagged, it would pass for the accept length per drafted step, which it is not.
    assert plain["accept_length"] == plain["tokens_per_step"]
    assert plain["accept_length"] < truth_per_drafted_step * 0.9
    # Flagged: no accept length, and why.
    assert flagged["accept_length"] is None
    assert flagged["accept_length_source"] == "not_determinable"
    assert flagged["accept_length_note"] == UNDRAFTED_STEPS_REASON

    # A comparison shows tokens per step and no accept length (not the per-request figure,
    # completion tokens / verify calls, which counts the same undrafted steps).
    run = LevelRun(sweep_id=1, index=0, concurrency=4, figures={}, server=dict(flagged),
                   summary={"acceptance": {"accept_length": 2.0, "acceptance_rate": 0.7}})  # fmt: skip
    row = workload.acceptance_row([run])
    assert row["accept_length"] is None and row["accept_length_source"] == "not_determinable"
    assert "not determinable" in row["accept_length_source_text"]
    assert row["tokens_per_step"] == pytest.approx(truth_per_step, rel=0.02)
    assert row["acceptance_rate"] == 0.7  # drafted / accepted tokens: 0-step tiers add none


def test_which_servers_may_run_undrafted_steps() -> None:
    adaptive = ["python", "-m", "sglang.launch_server", "--speculative-adaptive",
                "--speculative-adaptive-config", "tiers.json"]  # fmt: skip
    assert undrafted_steps({"instance": {"launch_argv": adaptive}}) is True
    assert undrafted_steps({"instance": {"server_info": {"speculative_adaptive": True}}}) is True
    fixed = ["python", "-m", "sglang.launch_server", "--speculative-num-steps", "3"]
    assert undrafted_steps({"instance": {"launch_argv": fixed, "server_info": {}}}) is False
    assert undrafted_steps({}) is False
