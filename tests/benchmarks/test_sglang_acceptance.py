"""SGLang's acceptance per level, as a sweep stores it and a comparison shows it, against the
simulator's truth log (the drafted and accepted draft tokens it counted for each request).

The simulator serves an SGLang-0.5.23-shaped exposition (`sglang:spec_verify_calls_total`, the
`sglang:spec_accept_rate` gauge over its last 40 decode passes, no drafted- or accepted-token
counter) and the per-request `meta_info` figures. The gauge's window is not the level, so the
figure shown must come from the level's own requests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.experiments import workload
from benchmarks.experiments.series import sweep_series
from benchmarks.sweeps.models import Sweep, SweepLevel
from benchmarks.sweeps.recordfile import read_record_file
from hosts.telemetry.levels import UNDRAFTED_STEPS_REASON
from tests.benchmarks.conftest import Simulator, start_simulator
from tests.benchmarks.test_audit import _measure

LEVELS = [1, 4]


@pytest.fixture
def sglang_truth(tmp_path: Path) -> Any:
    truth = tmp_path / "truth.jsonl"
    # EAGLE-3 acceptance (SGLang-style metrics are the default) with 2 ms steps to keep it short:
    # acceptance does not depend on the step time.
    sim = start_simulator(
        tmp_path, "--profile", "eagle3", "--t0-ms", "2", "--k-ms", "0", "--seed", "11",
        "--truth-log", str(truth),
    )  # fmt: skip
    try:
        yield sim, truth
    finally:
        sim.kill()


def _truth_per_level(sweep: Sweep, truth_path: Path) -> dict[int, dict[str, float]]:
    """Each level's acceptance rate and decode tokens per verify step from the truth log's lines of
    that level's measured requests (matched by request id)."""
    truth = {
        row["request_id"]: row
        for row in map(json.loads, truth_path.read_text().splitlines())
        if row.get("spec_verify_steps")
    }
    records = read_record_file(Path(sweep.records_path))
    out = {}
    for level in SweepLevel.objects.filter(sweep=sweep):
        rows = [truth[r["id"]] for r in records.measured(level.index, level.attempt)]
        assert len(rows) == 12
        drafted = sum(r["spec_drafted"] for r in rows)
        accepted = sum(r["spec_accepted"] for r in rows)
        steps = sum(r["spec_verify_steps"] for r in rows)
        # Tokens per verify step: each request's first token comes from the prefill.
        decoded = sum(r["completion_tokens"] - 1 for r in rows)
        out[level.concurrency] = {"rate": accepted / drafted, "length": decoded / steps}
    return out


def test_sglang_acceptance_rate_per_level_is_within_2_percent_of_the_truth(
    sglang_truth: tuple[Simulator, Path], transactional_db: Any
) -> None:
    sim, truth_path = sglang_truth
    sweep = _measure(
        sim, LEVELS, api="generate", requests_per_level=12, max_tokens=48, ignore_eos=True
    )
    truth = _truth_per_level(sweep, truth_path)
    (series,) = sweep_series(sweeps=[sweep])
    grouped: dict[int, list[Any]] = {}
    for run in series.runs:
        grouped.setdefault(run.concurrency, []).append(run)
    for concurrency in LEVELS:
        level = SweepLevel.objects.get(sweep=sweep, concurrency=concurrency)
        stored = level.summary["acceptance"]
        assert stored["acceptance_rate"] == pytest.approx(truth[concurrency]["rate"], rel=0.02)
        # What a comparison, its CSV and the HTML report show for this level.
        shown = workload.acceptance_row(grouped[concurrency])
        assert shown["acceptance_rate_source"] == "requests"
        assert shown["acceptance_rate"] == pytest.approx(truth[concurrency]["rate"], rel=0.02)
        assert shown["accept_length"] == pytest.approx(truth[concurrency]["length"], rel=0.02)
        # The server's own exact figure, from its verify-call counter, agrees too.
        server = level.server_metrics
        assert server["tokens_per_step_source"] == "verify_counters"
        # SGLang has no drafted-token counter: the rate it exports is the gauge (absent until
        # a 40-pass window has closed), never an exact per-level figure.
        assert server["acceptance_rate_source"] in ("gauge", None)
        assert server["tokens_per_step"] == pytest.approx(truth[concurrency]["length"], rel=0.02)
    # Not vacuous: the truth is a real acceptance between the draws' extremes.
    assert all(0.3 < t["rate"] < 0.95 for t in truth.values()), truth


@pytest.mark.django_db
def test_the_sweep_page_says_why_an_adaptive_servers_accept_length_is_not_given(
    client: Any, viewer: Any
) -> None:
    sweep = Sweep.objects.create(name="adaptive", levels=[8], state="completed")
    SweepLevel.objects.create(
        sweep=sweep, index=0, concurrency=8, state="completed", output_tok_s=100.0,
        server_metrics={"available": True, "accept_length": None, "tokens_per_step": 1.27,
                        "accept_length_source": "not_determinable",
                        "tokens_per_step_source": "verify_counters",
                        "accept_length_note": UNDRAFTED_STEPS_REASON},
    )  # fmt: skip
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert 'data-source="not_determinable"' in page
    assert "not determinable: 0-step tiers count as verify calls" in page
