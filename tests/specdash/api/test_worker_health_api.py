"""The job worker's health as users meet it: ``GET /api/v1/health``, the banner on every page,
and new work refused (503 ``worker_unavailable``, a message on the page) while no healthy
worker is alive; a stop is never refused."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from benchmarks.experiments.models import Experiment
from benchmarks.sweeps.models import Sweep
from core.jobs.health import worker_beat
from hosts.models import InstanceState, ServerInstance, ServerProfile
from tests.specdash.api.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db

LOAD = {"requests_per_level": 4, "max_tokens": 16}


@pytest.fixture(autouse=True)
def _worker_required(settings: Any) -> None:
    settings.SPECDASH_WORKER_REQUIRED = True
    settings.SPECDASH_JOB_LEASE_S = 30.0


def test_health_needs_a_login(anonymous: ApiClient) -> None:
    assert anonymous.get("/api/v1/health").status_code == 401


def test_health_says_whether_a_healthy_worker_is_alive(as_viewer: ApiClient) -> None:
    down = as_viewer.get("/api/v1/health").json()
    assert down["ok"] is False and down["workers"] == [] and down["stale_after_s"] == 30.0
    assert "No job worker has reported in the last 30 s" in down["message"]
    worker_beat(worker_id="w1", healthy=False, error="OperationalError: database is locked")
    sick = as_viewer.get("/api/v1/health").json()
    assert sick["ok"] is False and "database is locked" in sick["message"]
    assert sick["workers"][0]["worker_id"] == "w1" and sick["workers"][0]["healthy"] is False
    worker_beat(worker_id="w1")
    up = as_viewer.get("/api/v1/health").json()
    assert up["ok"] is True and up["workers"][0]["healthy"] is True


def test_new_work_is_refused_with_503_while_no_worker_is_alive(
    as_operator: ApiClient,
    make_profile: Callable[..., ServerProfile],
    make_instance: Callable[..., ServerInstance],
) -> None:
    profile, other = make_profile(), make_profile()
    ready = make_instance(make_profile())
    bodies = {
        f"/api/v1/profiles/{profile.pk}/start": None,
        "/api/v1/sweeps": {"instance_id": ready.pk, "levels": [1], "load": LOAD},
        "/api/v1/experiments": {"profiles": [profile.pk, other.pk], "levels": [1], "load": LOAD},
    }
    for path, body in bodies.items():
        response = as_operator.post(path, body)
        assert response.status_code == 503, (path, response.content)
        error = error_of(response)
        assert error["code"] == "worker_unavailable"
        assert "New servers, sweeps and experiments are refused" in error["message"]
    assert ServerInstance.objects.filter(profile=profile).count() == 0
    assert not Sweep.objects.exists() and not Experiment.objects.exists()
    # A stop is never refused: the instance's owner (or the next worker) carries it out.
    assert as_operator.post(f"/api/v1/instances/{ready.pk}/stop").status_code == 202
    worker_beat(worker_id="w1")
    for path, body in bodies.items():
        assert as_operator.post(path, body).status_code == 202, path


def test_every_page_shows_the_worker_down_banner_and_the_start_button_says_why(
    operator: User, make_profile: Callable[..., ServerProfile]
) -> None:
    client = Client()
    client.force_login(operator)
    profile = make_profile()
    for url in ("/", "/servers/", "/sweeps/", "/experiments/", "/account/tokens/"):
        page = client.get(url, follow=True).content.decode()
        assert 'data-testid="worker-banner"' in page, url
        assert "No job worker has reported" in page, url
        assert "worker down" in page, url
    refused = client.post(f"/servers/profiles/{profile.pk}/start/", follow=True)
    assert "New servers, sweeps and experiments are refused" in refused.content.decode()
    assert not ServerInstance.objects.filter(profile=profile).exists()
    worker_beat(worker_id="w1")
    page = client.get("/servers/").content.decode()
    assert 'data-testid="worker-banner"' not in page and "worker ok" in page
    started = client.post(f"/servers/profiles/{profile.pk}/start/")
    assert started.status_code == 302
    assert ServerInstance.objects.get(profile=profile).state == InstanceState.STARTING


@pytest.mark.django_db(transaction=True)
def test_a_write_the_database_refuses_answers_503_naming_it_not_500(
    as_operator: ApiClient,
    make_profile: Callable[..., ServerProfile],
    make_instance: Callable[..., ServerInstance],
    short_busy_timeout: float,
) -> None:
    ready = make_instance(make_profile())
    holder = sqlite3.connect(connection.settings_dict["NAME"], timeout=5, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        response = as_operator.post(f"/api/v1/instances/{ready.pk}/stop")
        assert response.status_code == 503, response.content
        error = error_of(response)
        assert error["code"] == "database_unavailable"
        assert "database is locked" in error["message"]
        # Reads go on meanwhile.
        assert as_operator.get(f"/api/v1/instances/{ready.pk}").status_code == 200
    finally:
        holder.close()
        connection.close()
    assert as_operator.post(f"/api/v1/instances/{ready.pk}/stop").status_code == 202
