"""POST /experiments/matrix, POST /experiments/{id}/verify, GET /experiments/{id}/verification."""

from __future__ import annotations

import sys
from collections.abc import Callable

from benchmarks.models import Experiment
from hosts.models import ServerProfile
from tests.api.conftest import ApiClient, error_of

SIM = [sys.executable, "-m", "benchmarks.simulator", "--profile", "eagle3"]
LOAD = {"requests_per_level": 4, "max_tokens": 8}


def test_matrix_creates_the_variants_and_an_experiment_with_them_as_arms(
    as_operator: ApiClient, make_profile: Callable[..., ServerProfile]
) -> None:
    base = make_profile(name="Sim", launch_argv=SIM, speculative=True)
    response = as_operator.post(
        "/api/v1/experiments/matrix",
        {"profile": base.pk, "axes": {"--speculative-num-steps": [1, 3]}, "include_off": True,
         "levels": [1, 2], "load": LOAD},
    )  # fmt: skip
    assert response.status_code == 202, response.content
    body = response.json()
    experiment = Experiment.objects.get(pk=body["experiment"]["id"])
    arms = list(experiment.arms.order_by("position").select_related("profile"))
    assert [a.profile.name for a in arms] == ["Sim [off]", "Sim [K=1]", "Sim [K=3]"]
    assert arms[1].profile.launch_argv == [*SIM, "--speculative-num-steps", "1"]
    assert experiment.levels == [1, 2]
    assert body["job_url"] == f"/api/v1/jobs/{body['job']['id']}"


def test_matrix_with_a_key_axis_on_a_flag_the_base_lacks_is_422_and_creates_nothing(
    as_operator: ApiClient, make_profile: Callable[..., ServerProfile]
) -> None:
    base = make_profile(launch_argv=SIM)
    profiles, experiments = ServerProfile.objects.count(), Experiment.objects.count()
    response = as_operator.post(
        "/api/v1/experiments/matrix",
        {"profile": base.pk, "axes": {"--speculative-config.num_speculative_tokens": [1, 3]},
         "levels": [1]},
    )  # fmt: skip
    assert response.status_code == 422
    error = error_of(response)
    assert "--speculative-config is not in the base argv" in error["message"]
    assert "axes" in error["fields"]
    assert (ServerProfile.objects.count(), Experiment.objects.count()) == (profiles, experiments)


def test_matrix_with_empty_or_non_scalar_values_is_422(
    as_operator: ApiClient, make_profile: Callable[..., ServerProfile]
) -> None:
    base = make_profile(launch_argv=SIM)
    for values, message in (([], "non-empty list"), ([[1]], "numbers or strings")):
        response = as_operator.post(
            "/api/v1/experiments/matrix",
            {"profile": base.pk, "axes": {"--spec-steps": values}, "levels": [1]},
        )
        assert response.status_code == 422
        assert message in error_of(response)["message"]


def test_matrix_needs_the_operator_role(
    as_viewer: ApiClient, make_profile: Callable[..., ServerProfile]
) -> None:
    base = make_profile(launch_argv=SIM)
    response = as_viewer.post(
        "/api/v1/experiments/matrix",
        {"profile": base.pk, "axes": {"--spec-steps": [1, 2]}, "levels": [1]},
    )
    assert response.status_code == 403
    assert ServerProfile.objects.count() == 1 and Experiment.objects.count() == 0


def test_matrix_of_an_unknown_profile_is_404(as_operator: ApiClient) -> None:
    response = as_operator.post(
        "/api/v1/experiments/matrix",
        {"profile": 999, "axes": {"--spec-steps": [1, 2]}, "levels": [1]},
    )
    assert response.status_code == 404
