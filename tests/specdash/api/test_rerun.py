"""Re-runs over the API: a sweep or an experiment again with the same settings (202), by
operators only, refused while it runs (422)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.experiments.models import Experiment, ExperimentState
from benchmarks.sweeps.models import Sweep
from tests.specdash.api.conftest import ApiClient

pytestmark = pytest.mark.django_db

LOAD = {"requests_per_level": 4, "max_tokens": 16}


def test_a_finished_sweep_is_re_run_by_operators_only(
    as_operator: ApiClient, as_viewer: ApiClient, make_profile: Any, make_instance: Any
) -> None:
    ready = make_instance(make_profile(served_model_name="sim"))
    created = as_operator.post(
        "/api/v1/sweeps", {"instance_id": ready.pk, "levels": [1, 2], "load": LOAD}
    ).json()["sweep"]
    running = as_operator.post(f"/api/v1/sweeps/{created['id']}/rerun")
    assert running.status_code == 422
    Sweep.objects.filter(pk=created["id"]).update(state="completed")
    assert as_viewer.post(f"/api/v1/sweeps/{created['id']}/rerun").status_code == 403
    response = as_operator.post(f"/api/v1/sweeps/{created['id']}/rerun")
    assert response.status_code == 202, response.content
    again = Sweep.objects.get(pk=response.json()["sweep"]["id"])
    assert again.pk != created["id"] and again.levels == [1, 2] and again.instance == ready


def test_a_failed_experiment_is_retried(as_operator: ApiClient, make_profile: Any) -> None:
    profiles = [make_profile().pk, make_profile().pk]
    body = as_operator.post(
        "/api/v1/experiments", {"profiles": profiles, "levels": [1], "load": LOAD}
    ).json()
    experiment_id = body["experiment"]["id"]
    Experiment.objects.filter(pk=experiment_id).update(state=ExperimentState.FAILED)
    response = as_operator.post(f"/api/v1/experiments/{experiment_id}/rerun")
    assert response.status_code == 202, response.content
    again = Experiment.objects.get(pk=response.json()["experiment"]["id"])
    assert [a.profile_id for a in again.arms.order_by("position")] == profiles
