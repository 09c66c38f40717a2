"""Authentication (bearer tokens, session + CSRF) and the role checks, on every endpoint."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from core.models import ApiToken
from core.tokens import api_token_create, api_token_revoke
from hosts.models import ServerInstance
from specdash.api import api
from tests.specdash.api.conftest import ApiClient, error_of

SCHEMA = api.get_openapi_schema()


# Required query parameters, so that requests get past validation to the permission check.
REQUIRED_QUERY = {"/api/v1/comparisons": "?sweep=1&sweep=2"}


def _concrete(path: str) -> str:
    return re.sub(r"\{\w+\}", "1", path) + REQUIRED_QUERY.get(path, "")


OPERATIONS = sorted(
    (method.upper(), _concrete(path)) for path, item in SCHEMA["paths"].items() for method in item
)
READS = [(m, p) for m, p in OPERATIONS if m == "GET"]
WRITES = [(m, p) for m, p in OPERATIONS if m != "GET"]


def _call(client: ApiClient, method: str, path: str) -> Any:
    if method == "GET":
        return client.get(path)
    if method == "PATCH":
        return client.patch(path, {})
    return client.post(path, {})


def test_the_schema_lists_every_resource() -> None:
    paths = set(SCHEMA["paths"])
    for expected in (
        "/api/v1/hosts",
        "/api/v1/containers",
        "/api/v1/profiles",
        "/api/v1/profiles/{profile_id}/start",
        "/api/v1/instances/{instance_id}/stop",
        "/api/v1/instances/{instance_id}/events",
        "/api/v1/instances/{instance_id}/log",
        "/api/v1/sweeps",
        "/api/v1/sweeps/{sweep_id}/levels",
        "/api/v1/sweeps/{sweep_id}/samples",
        "/api/v1/sweeps/{sweep_id}/cancel",
        "/api/v1/sweeps/{sweep_id}/levels.csv",
        "/api/v1/experiments",
        "/api/v1/experiments/{experiment_id}/comparison",
        "/api/v1/comparisons",
        "/api/v1/jobs/{job_id}",
    ):
        assert expected in paths
    assert len(OPERATIONS) >= 30


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_every_endpoint_answers_401_without_a_token(
    anonymous: ApiClient, method: str, path: str
) -> None:
    response = _call(anonymous, method, path)
    assert response.status_code == 401, response.content
    assert error_of(response)["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == "Bearer"


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_every_endpoint_refuses_an_unknown_token(method: str, path: str) -> None:
    response = _call(ApiClient("sdt_not-a-real-token"), method, path)
    assert response.status_code == 401
    assert error_of(response)["code"] == "invalid_token"


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), READS)
def test_a_user_without_a_role_cannot_read_anything(
    django_user_model: Any, token_for: Callable[..., str], method: str, path: str
) -> None:
    nobody = django_user_model.objects.create_user("nobody", password="nobody-pass-123")
    response = _call(ApiClient(token_for(nobody)), method, path)
    assert response.status_code == 403
    assert error_of(response)["code"] == "permission_denied"


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), READS)
def test_a_viewer_passes_the_permission_check_of_every_read(
    as_viewer: ApiClient, method: str, path: str
) -> None:
    response = _call(as_viewer, method, path)
    # Nothing exists yet: 404 (422 for the comparison's unknown sweeps), but never 403.
    assert response.status_code in {200, 404, 422}, response.content
    if response.status_code != 200:
        assert error_of(response)["code"] in {"not_found", "validation_error"}


# A body each write accepts, so that a refused request was refused by the permission check and
# not by validation (an empty body is a 422 before any handler runs). Endpoints without a body
# map to None. A new write must be added here (test_every_write_has_a_valid_body).
VALID_BODIES: dict[tuple[str, str], dict[str, Any] | None] = {
    ("POST", "/api/v1/hosts"): {"name": "gpu-7"},
    ("PATCH", "/api/v1/hosts/1"): {"name": "gpu-8"},
    ("POST", "/api/v1/containers"): {"host_id": 1},
    ("PATCH", "/api/v1/containers/1"): {},
    ("POST", "/api/v1/profiles"): {
        "name": "sim", "host_id": 1, "launch_argv": ["python3", "-m", "benchlib.simulator"],
        "port": 18000,
    },
    ("PATCH", "/api/v1/profiles/1"): {"name": "sim 2"},
    ("POST", "/api/v1/profiles/1/start"): None,
    ("POST", "/api/v1/instances/1/stop"): None,
    ("POST", "/api/v1/instances/1/kill-holders"): {
        "holders": [{"pid": 4242, "start_time": 99}], "confirm": True,
    },
    ("POST", "/api/v1/sweeps"): {"levels": [1, 2]},
    # A name the service refuses (past the role check), so nothing is stored.
    ("POST", "/api/v1/traces"): {"name": "../t.jsonl", "content": "{}"},
    ("POST", "/api/v1/sweeps/1/cancel"): None,
    ("POST", "/api/v1/sweeps/1/resume"): None,
    ("POST", "/api/v1/sweeps/1/abandon"): None,
    ("POST", "/api/v1/sweeps/1/rerun"): None,
    ("POST", "/api/v1/experiments/1/rerun"): None,
    ("POST", "/api/v1/experiments/matrix"): {
        "profile": 1, "axes": {"--speculative-num-steps": [1, 3]}, "levels": [1],
    },
    ("POST", "/api/v1/experiments/1/verify"): {},
    ("POST", "/api/v1/experiments/breakeven"): {"profile": 1, "acceptances": [2.0, 3.0], "levels": [1]},
    ("POST", "/api/v1/experiments/1/breakeven/checks"): {"category": "chat", "experiment": 2},
    ("POST", "/api/v1/experiments"): {
        "profiles": [1, 1], "levels": [1],
        "arm_loads": [{"temperature": 0}, {"api": "chat", "temperature": 1.0}],
    },
    ("POST", "/api/v1/experiments/1/cancel"): None,
    ("POST", "/api/v1/experiments/1/resume"): None,
}  # fmt: skip


def _write(client: ApiClient, method: str, path: str) -> Any:
    body = VALID_BODIES[(method, path)]
    if method == "PATCH":
        return client.patch(path, body)
    return client.post(path, body)


def test_every_write_has_a_valid_body() -> None:
    assert set(VALID_BODIES) == set(WRITES)


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), WRITES)
def test_a_viewer_can_change_nothing(as_viewer: ApiClient, method: str, path: str) -> None:
    response = _write(as_viewer, method, path)
    assert response.status_code == 403, response.content
    assert error_of(response)["code"] == "permission_denied"


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path"), WRITES)
def test_the_bodies_the_viewer_was_refused_pass_validation(
    as_staff: ApiClient, method: str, path: str
) -> None:
    # The same request from staff gets past the body's schema and the permission check (to a
    # 404, or to a service's 422 about objects that do not exist: nothing with id 1 does),
    # which is what makes the viewer's 403 the role's answer. Schema errors name "body...".
    response = _write(as_staff, method, path)
    assert response.status_code not in {401, 403}, response.content
    if response.status_code >= 400:
        fields = error_of(response)["fields"]
        assert not [f for f in fields if f.split(".")[0] == "body"], response.content


@pytest.mark.django_db
def test_a_revoked_token_is_refused(operator: User) -> None:
    token, secret = api_token_create(user=operator, name="ci")
    assert ApiClient(secret).get("/api/v1/hosts").status_code == 200
    api_token_revoke(token=token)
    response = ApiClient(secret).get("/api/v1/hosts")
    assert response.status_code == 401
    assert error_of(response)["code"] == "token_revoked"


@pytest.mark.django_db
def test_an_expired_token_is_refused(operator: User) -> None:
    _, live = api_token_create(
        user=operator, name="ok", expires_at=timezone.now() + timedelta(days=1)
    )
    _, dead = api_token_create(
        user=operator, name="old", expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert ApiClient(live).get("/api/v1/hosts").status_code == 200
    response = ApiClient(dead).get("/api/v1/hosts")
    assert response.status_code == 401
    assert error_of(response)["code"] == "token_expired"


@pytest.mark.django_db
def test_the_token_of_a_deactivated_user_is_refused(operator: User) -> None:
    _, secret = api_token_create(user=operator, name="ci")
    operator.is_active = False
    operator.save()
    response = ApiClient(secret).get("/api/v1/hosts")
    assert response.status_code == 401
    assert error_of(response)["code"] == "invalid_token"


@pytest.mark.django_db
def test_only_a_sha256_of_the_token_is_stored(operator: User) -> None:
    token, secret = api_token_create(user=operator, name="ci")
    row = ApiToken.objects.filter(pk=token.pk).values().get()
    assert row["token_hash"] == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in [str(v) for v in row.values()]
    assert secret.startswith(row["prefix"]) and len(row["prefix"]) < len(secret) // 3
    assert len(secret) >= 40  # 32 random bytes, url-safe


@pytest.mark.django_db
def test_use_records_the_last_used_time(operator: User) -> None:
    token, secret = api_token_create(user=operator, name="ci")
    assert token.last_used_at is None
    ApiClient(secret).get("/api/v1/hosts")
    token.refresh_from_db()
    assert token.last_used_at is not None


@pytest.mark.django_db
def test_a_token_acts_as_its_owner(
    operator: User, as_operator: ApiClient, make_profile: Any
) -> None:
    profile = make_profile()
    response = as_operator.post(f"/api/v1/profiles/{profile.pk}/start")
    assert response.status_code == 202
    assert ServerInstance.objects.get().started_by == operator
    assert response.json()["instance"]["started_by"] == operator.username


@pytest.mark.django_db
def test_the_browser_session_authenticates_reads(operator: User) -> None:
    client = Client()
    client.force_login(operator)
    assert client.get("/api/v1/hosts").status_code == 200


@pytest.mark.django_db
def test_a_session_write_needs_the_csrf_token(operator: User, make_profile: Any) -> None:
    profile = make_profile()
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator)
    refused = client.post(f"/api/v1/profiles/{profile.pk}/start")
    assert refused.status_code == 403
    assert error_of(refused)["code"] == "csrf_failed"
    assert not ServerInstance.objects.exists()
    client.get("/account/tokens/")  # any page sets the CSRF cookie
    csrf = client.cookies["csrftoken"].value
    accepted = client.post(f"/api/v1/profiles/{profile.pk}/start", headers={"X-CSRFToken": csrf})
    assert accepted.status_code == 202


@pytest.mark.django_db
def test_an_anonymous_api_client_gets_401_json_not_the_login_redirect(client: Client) -> None:
    response = client.get("/api/v1/instances")
    assert response.status_code == 401
    assert response["Content-Type"] == "application/json; charset=utf-8"
