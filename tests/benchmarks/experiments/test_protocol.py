"""The default protocol: repeats in interleaved A B B A order on every edge that creates an
experiment, and the single-run mode labelled as a within-run interval."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from benchlib.stats.intervals import interval_scope, level_ratio
from benchlib.stats.types import LevelSample, RequestPoint
from benchmarks.experiments import recording, services
from benchmarks.experiments.forms import ExperimentForm, MatrixForm
from benchmarks.experiments.models import Experiment
from benchmarks.experiments.protocol import experiment_protocol
from hosts.models import ServerProfile
from specdash.api.client import SpecdashClient
from tests.benchmarks.experiments.constructed import make_sweep


def _labels(arms: int, repeats: int, order: str) -> str:
    pairs = services.experiment_step_order(arms=arms, repeats=repeats, order=order)
    return " ".join(f"{'ABCD'[a]}{r}" for a, r in pairs)


def test_interleaved_runs_every_other_round_backwards() -> None:
    assert _labels(2, 2, "interleaved") == "A0 B0 B1 A1"
    assert _labels(2, 3, "interleaved") == "A0 B0 B1 A1 A2 B2"
    assert _labels(3, 2, "interleaved") == "A0 B0 C0 C1 B1 A1"
    assert _labels(2, 1, "interleaved") == "A0 B0"
    assert _labels(2, 2, "sequential") == "A0 A1 B0 B1"


def test_a_b_b_a_centres_both_arms_on_the_same_time_so_linear_drift_cancels() -> None:
    pairs = services.experiment_step_order(arms=2, repeats=2, order="interleaved")
    times = {a: [i for i, (arm, _) in enumerate(pairs) if arm == a] for a in (0, 1)}
    assert sum(times[0]) / 2 == sum(times[1]) / 2 == 1.5


def test_the_model_and_the_forms_default_to_two_interleaved_repeats() -> None:
    experiment = Experiment(name="x")
    assert (experiment.repeats, experiment.order) == (2, "interleaved")
    for form in (ExperimentForm, MatrixForm):
        fields = form.base_fields
        assert (fields["repeats"].initial, fields["order"].initial) == (2, "interleaved")
        assert "leaves out run-to-run variance" in str(fields["repeats"].help_text)


@pytest.mark.django_db
def test_the_new_experiment_page_preselects_the_default_protocol(
    client: Client, operator: Any, make_profile: Callable[..., ServerProfile]
) -> None:
    make_profile(name="a")
    client.force_login(operator)
    html = client.get("/experiments/new/").content.decode()
    assert 'name="repeats" value="2"' in html
    assert '<option value="interleaved" selected>' in html


def test_the_command_line_creates_with_the_default_protocol(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[Any] = []

    def post(self: Any, path: str, body: Any = None) -> Any:
        sent.append((path, body))
        return {"experiment": {"id": 1, "state": "queued"}}

    monkeypatch.setattr(SpecdashClient, "post", post)
    monkeypatch.setattr(SpecdashClient, "profile_id", lambda self, p: int(p))
    out = io.StringIO()
    call_command("specdash", "--token", "t", "experiment", "create", "1", "2", "--levels", "1",
                 stdout=out)  # fmt: skip
    call_command("specdash", "--token", "t", "experiment", "create", "1", "2", "--levels", "1",
                 "--repeats", "1", "--order", "sequential", stdout=out)  # fmt: skip
    assert [(b["repeats"], b["order"]) for _, b in sent] == [(2, "interleaved"), (1, "sequential")]


def test_the_interval_says_whether_it_holds_run_to_run_variance() -> None:
    a = [RequestPoint(0.1 * i, 0.1 * i + 1.0 + 0.1 * (i % 3), 10 + i % 4) for i in range(60)]
    b = [RequestPoint(0.1 * i, 0.1 * i + 1.1 + 0.1 * (i % 2), 10 + i % 3) for i in range(60)]
    single = level_ratio(LevelSample.from_requests(1, a), LevelSample.from_requests(1, b))
    repeated = level_ratio(
        LevelSample.from_repeats(1, [80.0, 82.0]), LevelSample.from_repeats(1, [81.0, 79.0])
    )
    assert interval_scope(single.method) == "within-run interval: leaves out run-to-run variance"
    assert interval_scope(repeated.method) == "between-run interval: includes run-to-run variance"
    assert interval_scope("none") == "no interval"


@pytest.mark.django_db
def test_the_stored_comparison_carries_the_protocol_its_drift_and_order_effect(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    base, spec = make_profile(name="base"), make_profile(name="eagle", speculative=True)
    experiment = services.experiment_create(
        profiles=[base, spec], levels=[1, 8], load={"requests_per_level": 10, "max_tokens": 16}
    )
    steps = list(experiment.steps.select_related("arm").order_by("index"))
    # The machine loses 3% per run at C=8 and nothing at C=1; B = 0.5 A at C=8.
    slow = [1.0, 0.97, 0.94, 0.91]
    for step in steps:
        scale = 1.0 if step.arm.label == "A" else 0.5
        values = {1: 100.0, 8: 500.0 * scale * slow[step.index]}
        make_sweep(base if step.arm.label == "A" else spec, values, tmp=tmp_path, step=step)
    result = recording.experiment_store_comparison(experiment_id=experiment.pk)
    protocol = result["protocol"]
    assert protocol["run_order"] == ["A", "B", "B", "A"]
    assert (protocol["mode"], protocol["interval_method"]) == ("repeats", "repeats-pooled-log-t")
    assert protocol["interval_scope"] == "between-run interval: includes run-to-run variance"
    c1, c8 = protocol["drift"]["B"]
    assert (c1["concurrency"], c1["largest_drift"], c1["order_effect"]) == (1, 0.0, 0.0)
    arms = {d["arm"]: d for d in c8["arms"]}
    assert arms["A"]["change"] == pytest.approx(0.91 - 1)
    assert arms["B"]["change"] == pytest.approx(0.94 / 0.97 - 1)
    assert c8["largest_drift"] == pytest.approx(-0.09) and c8["drift"] == pytest.approx(0.09)
    assert c8["order_effect"] == pytest.approx(0.97 / (0.94 / 0.91) - 1)
    experiment.refresh_from_db()
    assert experiment.comparison["protocol"] == protocol


@pytest.mark.django_db
def test_a_single_run_experiment_records_a_within_run_interval_and_no_drift(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    base, spec = make_profile(name="base"), make_profile(name="eagle", speculative=True)
    experiment = services.experiment_create(
        profiles=[base, spec], levels=[1], load={"requests_per_level": 10}, repeats=1
    )
    for step in experiment.steps.select_related("arm").order_by("index"):
        make_sweep(base if step.arm.label == "A" else spec, {1: 100.0}, tmp=tmp_path, step=step)
    protocol = experiment_protocol(experiment=experiment)
    assert (protocol["mode"], protocol["run_order"]) == ("single-run", ["A", "B"])
    assert protocol["interval_scope"] == "within-run interval: leaves out run-to-run variance"
    (level,) = protocol["drift"]["B"]
    assert level["arms"] == [] and level["largest_drift"] is None
    assert level["order_effect"] is None
