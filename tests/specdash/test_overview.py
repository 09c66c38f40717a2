"""The overview a first-time operator lands on: the latest sweeps and experiments with links,
the API docs one click away, at a query count that does not grow with the rows."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.experiments.models import Experiment, ExperimentArm
from benchmarks.sweeps.models import Sweep, SweepState
from hosts.models import ServerProfile

pytestmark = pytest.mark.django_db


def _overview(client: Client) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get("/")
    assert response.status_code == 200
    return len(ctx.captured_queries), response.content.decode()


def _results(profile: ServerProfile, n: int) -> None:
    for i in range(n):
        Sweep.objects.create(
            name=f"sweep {profile.pk}-{i}", profile=profile, levels=[1, 2],
            state=SweepState.COMPLETED,
        )  # fmt: skip
        experiment = Experiment.objects.create(name=f"experiment {profile.pk}-{i}", levels=[1])
        ExperimentArm.objects.create(experiment=experiment, profile=profile, label="A")


def test_the_overview_shows_the_latest_sweeps_and_experiments_with_links(
    client: Client, viewer: User, make_profile: Callable[..., ServerProfile]
) -> None:
    client.force_login(viewer)
    _, empty = _overview(client)
    assert "No sweeps yet" in empty and "No experiments yet" in empty
    profile = make_profile(name="Baseline")
    _results(profile, 7)
    _, page = _overview(client)
    newest_sweep = Sweep.objects.order_by("-created_at", "-pk").first()
    newest_experiment = Experiment.objects.order_by("-created_at", "-pk").first()
    assert newest_sweep is not None and newest_experiment is not None
    assert reverse("benchmarks:sweep-detail", args=[newest_sweep.pk]) in page
    assert reverse("benchmarks:experiment-detail", args=[newest_experiment.pk]) in page
    assert "A: Baseline" in page
    # The latest five of each, newest first, not the whole history.
    sweeps = [int(pk) for pk in re.findall(r'href="/sweeps/(\d+)/"', page)]
    experiments = [int(pk) for pk in re.findall(r'href="/experiments/(\d+)/"', page)]
    assert sweeps == sorted(Sweep.objects.values_list("pk", flat=True), reverse=True)[:5]
    assert experiments == sorted(Experiment.objects.values_list("pk", flat=True), reverse=True)[:5]


def test_the_overview_costs_the_same_queries_with_more_results(
    client: Client, viewer: User, make_profile: Callable[..., ServerProfile]
) -> None:
    client.force_login(viewer)
    _results(make_profile(), 1)
    one, _ = _overview(client)
    _results(make_profile(), 4)
    five, _ = _overview(client)
    assert five == one


def test_every_page_links_the_api_docs_in_its_navigation(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    docs = reverse("api-v1:openapi-view")
    for url in ("/", reverse("hosts:server-list"), reverse("benchmarks:sweep-list")):
        page = client.get(url).content.decode()
        assert f'<a href="{docs}" data-testid="nav-api-docs">API docs</a>' in page, url
    assert client.get(docs).status_code == 200
