"""The audit rebuilds an experiment's whole comparison (cells, ratios and intervals, goodput
ratios, verdicts, decisions and their statements) from its levels and records, independently
of the stored one, and reports each stored figure that differs; the outcome is kept when the
audit runs and the pages show it without running it again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from benchmarks import audit, audit_comparison, audit_levels
from benchmarks.experiments import recording as experiment_recording
from benchmarks.experiments import services as experiment_services
from benchmarks.experiments.models import Experiment
from benchmarks.sweeps.models import Sweep, SweepLevel
from hosts.models import ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep

pytestmark = pytest.mark.django_db

SLO = {"ttft_ms": 60_000.0, "scope": "request", "attainment": 0.9}
# Arm A's and arm B's level throughput (tok/s): B ahead at C=1, behind at C=8.
VALUES = {"A": {1: 92.0, 8: 400.0}, "B": {1: 96.0, 8: 260.0}}


def _with_server_and_goodput(sweep: Sweep, speculative: bool) -> None:
    """What a measured level also stores: its server figures (from the /metrics scrapes) and
    its goodput under the SLO; every request meets this loose SLO, so goodput = throughput."""
    for level in SweepLevel.objects.filter(sweep=sweep):
        tok_s = float(level.output_tok_s or 0.0)
        level.summary = {
            "requests": {"total": 40, "ok": 40, "failed": 0},
            "goodput": {"goodput_tok_s": tok_s, "goodput_req_s": tok_s / 100, "share": 1.0,
                        "meets_slo": True},
        }  # fmt: skip
        level.server_metrics = {"available": True, "generation_tokens": 4000}
        if speculative:
            level.server_metrics |= {
                "tokens_per_step": 2.5 - level.concurrency / 10,
                "tokens_per_step_source": "verify_counters",
                "accept_length": 2.5 - level.concurrency / 10,
                "accept_length_source": "verify_counters",
            }
        level.save(update_fields=["summary", "server_metrics"])


@pytest.fixture
def experiment(make_profile: Callable[..., ServerProfile], tmp_path: Path) -> Experiment:
    pair = make_profile(name="baseline"), make_profile(name="eagle", speculative=True)
    created = experiment_services.experiment_create(
        profiles=list(pair), levels=[1, 8], load={"requests_per_level": 5, "slo": SLO}, repeats=1
    )
    for step in created.steps.select_related("arm"):
        sweep = make_sweep(step.arm.profile, VALUES[step.arm.label], tmp=tmp_path, step=step)
        _with_server_and_goodput(sweep, speculative=step.arm.label == "B")
    experiment_recording.experiment_store_comparison(experiment_id=created.pk)
    experiment_recording.experiment_finish(experiment_id=created.pk, state="completed")
    return Experiment.objects.get(pk=created.pk)


def _tamper(experiment: Experiment, change: Callable[[dict[str, Any]], None]) -> list[str]:
    stored = Experiment.objects.get(pk=experiment.pk).comparison
    change(stored)
    Experiment.objects.filter(pk=experiment.pk).update(comparison=stored)
    return audit_comparison.audit_comparison(experiment=experiment).problems


def _row(comparison: dict[str, Any], concurrency: int) -> dict[str, Any]:
    return next(r for r in comparison["rows"] if r["concurrency"] == concurrency)


def test_the_comparison_as_stored_passes_and_carries_every_audited_part(
    experiment: Experiment,
) -> None:
    stored = experiment.comparison
    # The parts the tampering tests below change exist and carry figures: otherwise they
    # would pass for want of anything to compare.
    row = _row(stored, 8)
    assert row["goodput_ratios"][0]["point"] == pytest.approx(260 / 400)
    assert row["cells"][1]["tokens_per_step"] == pytest.approx(1.7)
    assert row["cells"][1]["steady_output_tok_s"] == pytest.approx(260 * 1.02)
    assert stored["verdicts"][0]["text"] and stored["verdicts"][0]["decision"]["levels"]
    assert audit_comparison.audit_comparison(experiment=experiment).problems == []


def test_a_tampered_steady_figure_in_a_cell_is_reported(experiment: Experiment) -> None:
    def tamper(c: dict[str, Any]) -> None:
        _row(c, 8)["cells"][0]["steady_output_tok_s"] = 999.0

    problems = _tamper(experiment, tamper)
    assert problems == [
        f"experiment #{experiment.pk}: the stored comparison's rows[C=8].cells[A]"
        f".steady_output_tok_s: stored 999.0, rebuilt gives {400 * 1.02!r}"
    ]


def test_a_tampered_server_figure_is_reported_in_the_row_and_the_series(
    experiment: Experiment,
) -> None:
    def tamper(c: dict[str, Any]) -> None:
        _row(c, 1)["cells"][1]["tokens_per_step"] = 3.9
        c["series"][1]["levels"][0]["tokens_per_step"] = 3.9

    problems = _tamper(experiment, tamper)
    assert len(problems) == 2, problems
    assert "rows[C=1].cells[B].tokens_per_step: stored 3.9, rebuilt gives 2.4" in problems[0]
    assert "series[B].levels[C=1].tokens_per_step: stored 3.9" in problems[1]


def test_a_tampered_goodput_ratio_is_reported(experiment: Experiment) -> None:
    def tamper(c: dict[str, Any]) -> None:
        _row(c, 8)["goodput_ratios"][0]["point"] = 3.73

    problems = _tamper(experiment, tamper)
    assert len(problems) == 1, problems
    assert "rows[C=8].goodput_ratios[B/A].point: stored 3.73, rebuilt gives 0.65" in problems[0]


def test_a_rewritten_verdict_and_recommendation_are_reported(experiment: Experiment) -> None:
    original = experiment.comparison["verdicts"][0]

    def tamper(c: dict[str, Any]) -> None:
        verdict = c["verdicts"][0]
        verdict["text"] = "B is faster at every level: keep speculation on everywhere."
        verdict["disable_speculation_above"] = None
        for level in verdict["decision"]["levels"]:
            level["status"] = "ahead"

    problems = _tamper(experiment, tamper)
    assert any("verdicts[B/A].text: stored 'B is faster" in p for p in problems), problems
    assert any(
        f"verdicts[B/A].disable_speculation_above: stored None, rebuilt gives "
        f"{original['disable_speculation_above']!r}" in p
        for p in problems
    ), problems
    # C=8 was behind (260 vs 400 tok/s): its status rewritten to "ahead" is caught.
    assert any(
        "verdicts[B/A].decision.levels[C=8].status: stored 'ahead', rebuilt gives 'behind'" in p
        for p in problems
    ), problems


def test_a_tampered_ratio_interval_is_reported(experiment: Experiment) -> None:
    def tamper(c: dict[str, Any]) -> None:
        _row(c, 1)["ratios"][0]["low"] = 0.5

    problems = _tamper(experiment, tamper)
    assert any("rows[C=1].ratios[B/A].low: stored 0.5, rebuilt gives" in p for p in problems)


def _must_not_run(**_: Any) -> None:
    raise AssertionError("a GET ran the audit")


def test_the_outcome_is_kept_by_the_command_and_shown_without_rerunning(
    experiment: Experiment, client: Client, viewer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.force_login(viewer)
    url = f"/experiments/{experiment.pk}/comparison/"
    assert 'data-testid="audit-warning"' not in client.get(url).content.decode()

    stored = experiment.comparison
    _row(stored, 8)["goodput_ratios"][0]["point"] = 3.73
    Experiment.objects.filter(pk=experiment.pk).update(comparison=stored)
    # Not audited since: the page shows the outcome kept (none); a GET runs no audit.
    with monkeypatch.context() as patched:
        for module, name in (
            (audit_levels, "audit_sweep"),
            (audit_comparison, "audit_comparison"),
            (audit, "audit_experiment"),
            (audit, "audit_sweeps"),
        ):
            patched.setattr(module, name, _must_not_run)
        page = client.get(url).content.decode()
        assert 'data-testid="audit-warning"' not in page
        assert client.get(f"/experiments/{experiment.pk}/report.html").status_code == 200

    with pytest.raises(CommandError):
        call_command("specdash", "audit", "--experiment", str(experiment.pk))
    kept = Experiment.objects.get(pk=experiment.pk).audit
    assert kept["ok"] is False and kept["checked_at"]
    # The constructed sweeps store summaries without clock anchors, which the sweep audit
    # reports; the tampered goodput ratio is among the problems kept.
    assert any("goodput_ratios[B/A].point: stored 3.73" in p for p in kept["problems"])
    page = client.get(url).content.decode()
    assert 'data-testid="audit-warning"' in page
    assert "goodput_ratios[B/A].point: stored 3.73" in page
    report = client.get(f"/experiments/{experiment.pk}/report.html").content.decode()
    assert 'data-testid="audit-warning"' in report and "stored 3.73" in report
