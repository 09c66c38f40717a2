"""POST /api/v1/experiments/matrix: an operator varies only the engine's declared tuning
flags, by type and range (hosts.presets.TUNING_FLAGS); staff may vary any flag."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from benchmarks.experiments.models import Experiment
from hosts.models import ServerProfile
from tests.benchmarks.experiments.test_matrix_axes import FORBIDDEN, OUT_OF_RANGE
from tests.benchmarks.experiments.test_tuning import LOAD, SIM
from tests.specdash.api.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def base(make_profile: Callable[..., ServerProfile]) -> ServerProfile:
    return make_profile(name="Sim", launch_argv=SIM, speculative=True)


@pytest.mark.parametrize(("flag", "values"), FORBIDDEN)
def test_an_operator_cannot_set_an_undeclared_flag_through_the_api(
    as_operator: ApiClient, base: ServerProfile, flag: str, values: list[Any]
) -> None:
    before = list(ServerProfile.objects.values_list("pk", "launch_argv"))
    response = as_operator.post(
        "/api/v1/experiments/matrix",
        {"profile": base.pk, "axes": {flag: values}, "levels": [1], "load": LOAD},
    )
    assert response.status_code == 422, response.content
    error = error_of(response)
    assert "not a tuning flag of a simulator profile" in error["message"]
    assert "axes" in error["fields"]
    assert list(ServerProfile.objects.values_list("pk", "launch_argv")) == before
    assert not Experiment.objects.exists()


@pytest.mark.parametrize(("flag", "values", "message"), OUT_OF_RANGE)
def test_an_operator_gets_422_for_a_value_of_the_wrong_type_or_range(
    as_operator: ApiClient, base: ServerProfile, flag: str, values: list[Any], message: str
) -> None:
    response = as_operator.post(
        "/api/v1/experiments/matrix",
        {"profile": base.pk, "axes": {flag: values}, "levels": [1], "load": LOAD},
    )
    assert response.status_code == 422, response.content
    assert message in error_of(response)["message"]
    assert ServerProfile.objects.count() == 1 and not Experiment.objects.exists()


def test_staff_may_set_any_flag_through_the_api(as_staff: ApiClient, base: ServerProfile) -> None:
    response = as_staff.post(
        "/api/v1/experiments/matrix",
        {"profile": base.pk, "axes": {"--truth-log": ["/tmp/a.jsonl"], "--spec-steps": [1000]},
         "include_off": True, "levels": [1], "load": LOAD},
    )  # fmt: skip
    assert response.status_code == 202, response.content
    variant = ServerProfile.objects.get(name="Sim [truth-log=/tmp/a.jsonl, K=1000]")
    assert variant.launch_argv == [*SIM, "--truth-log", "/tmp/a.jsonl", "--spec-steps", "1000"]
