"""The default protocol: repeats in interleaved A B B A order on every edge that creates an
experiment, and the single-run mode labelled as a within-run interval."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from benchlib.stats.intervals import interval_scope, level_ratio
from benchlib.stats.types import LevelSample, RequestPoint
from benchmarks.experiments import services
from benchmarks.experiments.forms import ExperimentForm, MatrixForm
from benchmarks.models import Experiment
from hosts.models import ServerProfile
from specdash.api.client import SpecdashClient


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
    a = [RequestPoint(0.1 * i, 0.1 * i + 1.0 + 0.1 * (i % 3), 10 + i % 4) for i in range(20)]
    b = [RequestPoint(0.1 * i, 0.1 * i + 1.1 + 0.1 * (i % 2), 10 + i % 3) for i in range(20)]
    single = level_ratio(LevelSample.from_requests(1, a), LevelSample.from_requests(1, b))
    repeated = level_ratio(
        LevelSample.from_repeats(1, [80.0, 82.0]), LevelSample.from_repeats(1, [81.0, 79.0])
    )
    assert interval_scope(single.method) == "within-run interval: leaves out run-to-run variance"
    assert interval_scope(repeated.method) == "between-run interval: includes run-to-run variance"
    assert interval_scope("none") == "no interval"
