"""The break-even map's surfaces on a map experiment with a constructed stored comparison:
the page (heat map, contour), the CSV and the API render the stored decisions' statuses;
roles as for experiments."""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from benchlib.stats.decision import Arm, LevelEvidence
from benchlib.stats.decision_rule import decide
from benchlib.stats.types import Ratio
from benchmarks.experiments import breakeven
from benchmarks.experiments.models import Experiment
from core.tokens import api_token_create
from hosts.models import ServerProfile
from tests.specdash.api.conftest import ApiClient

pytestmark = pytest.mark.django_db

SIM = [sys.executable, "-m", "benchlib.simulator", "--profile", "eagle3", "--port", "9244"]
# Forced accept length -> C -> B/A: ahead at C=1 from L=3, behind at C=4 everywhere.
POINTS = {2.0: {1: 0.8, 4: 0.6}, 3.0: {1: 1.2, 4: 0.9}}


def _decision(points: dict[int, float]) -> dict[str, object]:
    levels = [
        LevelEvidence(c, Ratio(p, p - 0.02, p + 0.02, "repeats-log-t", 0.95))
        for c, p in points.items()
    ]
    return decide(
        reference=Arm("off"), candidate=Arm("L", speculative=True), levels=levels
    ).to_dict()


def _token(user: User) -> str:
    return api_token_create(user=user, name="test")[1]


@pytest.fixture
def map_experiment(make_profile: Callable[..., ServerProfile]) -> Experiment:
    base = make_profile(launch_argv=SIM, speculative=True, port=9244)
    experiment = breakeven.map_create(
        base=base,
        acceptances=list(POINTS),
        levels=[1, 4],
        load={"requests_per_level": 4, "max_tokens": 8},
        user=None,
    )
    arms = list(experiment.arms.order_by("position").select_related("profile"))
    verdicts = []
    for arm in arms[1:]:
        forced = breakeven.forced_acceptance(arm.profile.engine, arm.profile.launch_argv)
        assert forced is not None
        verdicts.append(
            {"candidate": arm.label, "candidate_name": arm.profile.name,
             "decision": _decision(POINTS[forced])}
        )  # fmt: skip
    experiment.comparison = {"reference": arms[0].label, "verdicts": verdicts}
    experiment.save(update_fields=["comparison"])
    return experiment


def test_the_page_draws_the_heat_map_and_the_contour_from_the_stored_decisions(
    client: Client, viewer: User, map_experiment: Experiment
) -> None:
    client.force_login(viewer)
    response = client.get(f"/experiments/{map_experiment.pk}/breakeven/")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'data-testid="chart-breakeven"' in page
    figure = response.context["figure"]
    heat = figure["data"][0]
    assert heat["type"] == "heatmap" and heat["y"] == [2.0, 3.0] and heat["x"] == ["1", "4"]
    assert heat["z"] == [[0.8, 0.6], [1.2, 0.9]]
    assert heat["text"][1][0] == "1.20 ahead" and heat["text"][0][1] == "0.60 behind"
    contour = next(t for t in figure["data"] if t["name"] == "break-even (B/A = 1)")
    assert contour["x"] == ["1", "4"] and contour["y"][0] == pytest.approx(2.5)
    assert contour["y"][1] is None  # behind at every forced acceptance: no crossing
    assert "No prediction of this map has been checked yet." in page


def test_the_csv_and_the_api_carry_every_cell_with_its_status(
    client: Client, viewer: User, map_experiment: Experiment
) -> None:
    client.force_login(viewer)
    response = client.get(f"/experiments/{map_experiment.pk}/breakeven.csv")
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(r["accept_length"], r["concurrency"], r["status"]) for r in rows] == [
        ("2.0", "1", "behind"), ("2.0", "4", "behind"), ("3.0", "1", "ahead"),
        ("3.0", "4", "behind"),
    ]  # fmt: skip
    api = ApiClient(_token(viewer))
    body = api.get(f"/api/v1/experiments/{map_experiment.pk}/breakeven").json()
    assert body["map"]["acceptances"] == [2.0, 3.0]
    assert [c["status"] for c in body["map"]["cells"]] == [r["status"] for r in rows]
    assert body["map"]["contour"][0]["at"] == pytest.approx(2.5)
    assert body["placement"] is None and body["checks"] == []


def test_maps_are_created_by_operators_and_read_by_viewers_only(
    client: Client,
    make_profile: Callable[..., ServerProfile],
    operator: User,
    viewer: User,
    map_experiment: Experiment,
) -> None:
    base = make_profile(launch_argv=[*SIM[:-1], "9245"], speculative=True, port=9245)
    body = {"profile": base.pk, "acceptances": [2.0, 3.0], "levels": [1, 2],
            "load": {"requests_per_level": 4}}  # fmt: skip
    assert ApiClient(_token(viewer)).post("/api/v1/experiments/breakeven", body).status_code == 403
    created = ApiClient(_token(operator)).post("/api/v1/experiments/breakeven", body)
    assert created.status_code == 202, created.json()
    experiment = Experiment.objects.get(pk=created.json()["experiment"]["id"])
    assert breakeven.MAP_TAG in experiment.tags and experiment.arms.count() == 3
    assert (
        ApiClient(None).get(f"/api/v1/experiments/{map_experiment.pk}/breakeven").status_code == 401
    )
    anonymous = Client().get(f"/experiments/{map_experiment.pk}/breakeven/")
    assert anonymous.status_code == 302  # to the login page
    client.force_login(viewer)
    refused = client.post(
        f"/experiments/{map_experiment.pk}/breakeven/verify/", {"category": "chat", "sweep": 1}
    )
    assert refused.status_code == 403
    # Not a map (yet): no comparison stored.
    assert client.get(f"/experiments/{experiment.pk}/breakeven/").status_code == 404
