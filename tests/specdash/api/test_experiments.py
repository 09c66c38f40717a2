"""Experiments and comparisons over the API."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.experiments.models import Experiment
from benchmarks.sweeps.models import Sweep, SweepLevel
from tests.specdash.api.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db

LOAD = {"requests_per_level": 4, "max_tokens": 16}


def _sweep(instance: Any, values: dict[int, float]) -> Sweep:
    sweep = Sweep.objects.create(
        instance=instance, profile=instance.profile, levels=list(values), state="completed"
    )
    for index, (c, tok_s) in enumerate(values.items()):
        SweepLevel.objects.create(
            sweep=sweep, index=index, concurrency=c, state="completed", output_tok_s=tok_s,
            summary={"concurrency": c, "output_tok_s": tok_s},
        )  # fmt: skip
    return sweep


def test_create_answers_202_and_plans_the_default_protocol_a_b_b_a(
    as_operator: ApiClient, make_profile: Any
) -> None:
    a, b = make_profile(name="base"), make_profile(name="eagle", speculative=True)
    response = as_operator.post(
        "/api/v1/experiments", {"profiles": [a.pk, b.pk], "levels": [1, 2], "load": LOAD}
    )
    assert response.status_code == 202, response.content
    body = response.json()
    experiment = Experiment.objects.get()
    assert body["experiment"]["id"] == experiment.pk
    assert [(arm["label"], arm["profile"]) for arm in body["experiment"]["arms"]] == [
        ("A", "base"),
        ("B", "eagle"),
    ]
    assert body["job"]["kind"] == "experiment.run"
    detail = as_operator.get(body["experiment"]["url"]).json()
    assert [(s["label"], s["state"]) for s in detail["steps"]] == [
        ("A", "pending"),
        ("B", "pending"),
        ("B", "pending"),
        ("A", "pending"),
    ]
    assert (experiment.repeats, experiment.order) == (2, "interleaved")
    single = as_operator.post(
        "/api/v1/experiments",
        {"profiles": [a.pk, b.pk], "levels": [1], "load": LOAD, "repeats": 1},
    )
    assert single.status_code == 202, single.content
    steps = as_operator.get(single.json()["experiment"]["url"]).json()["steps"]
    assert [s["label"] for s in steps] == ["A", "B"]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"levels": [1], "repeats": 0}, "body.repeats"),
        ({"levels": [0]}, "levels"),
        ({"levels": [1], "order": "random"}, "order"),
    ],
)
def test_invalid_experiments_are_422(
    as_operator: ApiClient, make_profile: Any, extra: dict[str, Any], field: str
) -> None:
    a, b = make_profile(), make_profile()
    response = as_operator.post(
        "/api/v1/experiments", {"profiles": [a.pk, b.pk], "load": LOAD, **extra}
    )
    assert response.status_code == 422, response.content
    assert field in error_of(response)["fields"]


def test_an_experiment_needs_two_existing_profiles(
    as_operator: ApiClient, make_profile: Any
) -> None:
    a = make_profile()
    one = as_operator.post("/api/v1/experiments", {"profiles": [a.pk], "levels": [1], "load": LOAD})
    assert "body.profiles" in error_of(one)["fields"]
    unknown = as_operator.post(
        "/api/v1/experiments", {"profiles": [a.pk, 999], "levels": [1], "load": LOAD}
    )
    assert error_of(unknown)["fields"]["profiles"] == ["No profile #999."]


def test_cancel_of_a_queued_experiment(as_operator: ApiClient, make_profile: Any) -> None:
    a, b = make_profile(), make_profile()
    created = as_operator.post(
        "/api/v1/experiments", {"profiles": [a.pk, b.pk], "levels": [1], "load": LOAD}
    ).json()
    response = as_operator.post(f"/api/v1/experiments/{created['experiment']['id']}/cancel")
    assert response.status_code == 202
    assert response.json()["experiment"]["state"] == "cancelled"


def test_a_viewer_reads_but_cannot_create(as_viewer: ApiClient, make_profile: Any) -> None:
    a, b = make_profile(), make_profile()
    response = as_viewer.post(
        "/api/v1/experiments", {"profiles": [a.pk, b.pk], "levels": [1], "load": LOAD}
    )
    assert response.status_code == 403
    assert as_viewer.get("/api/v1/experiments").json()["count"] == 0


def test_comparing_two_sweeps_gives_ratios_and_a_verdict(
    as_viewer: ApiClient, make_profile: Any, make_instance: Any
) -> None:
    base = make_instance(make_profile(name="base"))
    eagle = make_instance(make_profile(name="eagle", speculative=True, port=39000))
    ref = _sweep(base, {1: 90.0, 2: 170.0, 5: 400.0})
    cand = _sweep(eagle, {1: 99.0, 2: 153.0, 5: 200.0})
    response = as_viewer.get(f"/api/v1/comparisons?sweep={ref.pk}&sweep={cand.pk}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["reference"] == "A"
    (verdict,) = body["verdicts"]
    points = {r["concurrency"]: r["point"] for r in verdict["ratios"]}
    assert points == pytest.approx({1: 1.1, 2: 0.9, 5: 0.5})
    # One figure per arm and level: no interval, so every level is inconclusive and nothing
    # is behind "from" anywhere, whatever the points say (behind_from is the decision's).
    assert verdict["speculative"] is True and verdict["behind_from"] is None
    assert verdict["settled_conclusively"] is False
    assert [lv["status"] for lv in verdict["decision"]["levels"]] == ["inconclusive"] * 3
    assert verdict["decision"]["behind_from"] is None
    assert verdict["crossover"]["last"]["lower_level"] == 1
    assert verdict["text"]


def test_comparing_unknown_sweeps_is_a_422(as_viewer: ApiClient) -> None:
    response = as_viewer.get("/api/v1/comparisons?sweep=5&sweep=6")
    assert response.status_code == 422
    assert "query.sweep" in error_of(response)["fields"]
    one = as_viewer.get("/api/v1/comparisons?sweep=5")
    assert one.status_code == 422


def test_an_experiment_comparison_is_built_from_its_sweeps(
    as_operator: ApiClient, make_profile: Any, make_instance: Any
) -> None:
    a, b = make_profile(name="base"), make_profile(name="eagle", speculative=True)
    created = as_operator.post(
        "/api/v1/experiments",
        {"profiles": [a.pk, b.pk], "levels": [1, 2], "load": LOAD, "repeats": 1},
    ).json()
    experiment = Experiment.objects.get(pk=created["experiment"]["id"])
    for step, profile, values in zip(
        experiment.steps.order_by("index"),
        [a, b],
        [{1: 90.0, 2: 170.0}, {1: 99.0, 2: 85.0}],
        strict=True,
    ):
        sweep = _sweep(make_instance(profile), values)
        sweep.experiment_step = step
        sweep.save()
    body = as_operator.get(f"/api/v1/experiments/{experiment.pk}/comparison").json()
    points = {r["concurrency"]: r["point"] for r in body["verdicts"][0]["ratios"]}
    assert points == pytest.approx({1: 1.1, 2: 0.5})


def test_the_protocol_gives_the_run_order_drift_and_what_differs_besides_the_launch(
    as_operator: ApiClient, as_viewer: ApiClient, anonymous: ApiClient, make_profile: Any,
    make_instance: Any,
) -> None:  # fmt: skip
    a, b = make_profile(name="base"), make_profile(name="eagle", speculative=True)
    created = as_operator.post(
        "/api/v1/experiments", {"profiles": [a.pk, b.pk], "levels": [1], "load": LOAD}
    ).json()
    experiment = Experiment.objects.get(pk=created["experiment"]["id"])
    # A B B A; A loses 10% between its first and last run; B's second run had another driver.
    values = {0: 100.0, 1: 120.0, 2: 121.0, 3: 90.0}
    for step in experiment.steps.select_related("arm").order_by("index"):
        instance = make_instance(a if step.arm.label == "A" else b, state="stopped")
        sweep = _sweep(instance, {1: values[step.index]})
        driver = "575.0" if step.index == 2 else "580.1"
        sweep.experiment_step = step
        sweep.environment = {"records": [{"driver_version": driver, "argv": [step.arm.label]}]}
        sweep.save()
    assert anonymous.get(f"/api/v1/experiments/{experiment.pk}/protocol").status_code == 401
    response = as_viewer.get(f"/api/v1/experiments/{experiment.pk}/protocol")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["protocol"]["run_order"] == ["A", "B", "B", "A"]
    assert body["protocol"]["interval_scope"] == (
        "between-run interval: includes run-to-run variance"
    )
    (level,) = body["protocol"]["drift"]["B"]
    assert level["drift"] == pytest.approx(0.1) and level["largest_drift"] == pytest.approx(-0.1)
    assert level["order_effect"] == pytest.approx((120 / 100) / (121 / 90) - 1)
    assert body["environment_differences"] == {"B": ["GPU driver: '580.1' vs '575.0'"]}
    assert [(r["step"], r["label"], r["repeat"]) for r in body["runs"]] == [
        (1, "A", 0), (2, "B", 0), (3, "B", 1), (4, "A", 1),
    ]  # fmt: skip
    assert body["runs"][2]["records"] == [{"driver_version": "575.0", "argv": ["B"]}]


def test_the_api_takes_each_arms_load_and_returns_it(
    as_operator: ApiClient, make_profile: Any
) -> None:
    profile = make_profile(name="eagle", speculative=True)
    body = {"profiles": [profile.pk, profile.pk], "levels": [1], "load": LOAD, "repeats": 1,
            "arm_loads": [{"api": "completions"}, {"api": "chat"}]}  # fmt: skip
    response = as_operator.post("/api/v1/experiments", body)
    assert response.status_code == 202, response.content
    arms = response.json()["experiment"]["arms"]
    assert [(a["label"], a["load"]) for a in arms] == [
        ("A", {"api": "completions"}),
        ("B", {"api": "chat"}),
    ]
    experiment = Experiment.objects.get()
    comparison = as_operator.get(f"/api/v1/experiments/{experiment.pk}/comparison").json()
    assert comparison["declared_axis"] == ["load: api"]
    # A setting outside the axes is not in the arm's schema; a bad value is the model's error.
    extra = as_operator.post("/api/v1/experiments", {**body, "arm_loads": [{}, {"max_tokens": 5}]})
    assert extra.status_code == 422
    assert any(f.startswith("body.") for f in error_of(extra)["fields"])
    bad = as_operator.post("/api/v1/experiments", {**body, "arm_loads": [{}, {"temperature": 9}]})
    assert bad.status_code == 422
    assert error_of(bad)["fields"]["load_b"] == ["Arm B: temperature: Must be between 0 and 2."]
