from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core.tokens import api_token_create
from hosts.models import InstanceState, ServerInstance, ServerProfile


@pytest.fixture(autouse=True)
def trace_folder(tmp_path: Path, settings: Any) -> Path:
    """Every API test's trace folder is its own: an upload (the schema fuzz's included) never
    writes to the deployment's."""
    settings.SPECDASH_TRACE_DIR = tmp_path / "traces"
    return tmp_path / "traces"


class ApiClient:
    """Django's test client with a bearer token and JSON bodies."""

    def __init__(self, token: str | None) -> None:
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(path, params, headers=self.headers)

    def post(self, path: str, body: Any = None) -> Any:
        return self.client.post(
            path, body if body is not None else {}, content_type="application/json",
            headers=self.headers,
        )  # fmt: skip

    def patch(self, path: str, body: Any) -> Any:
        return self.client.patch(path, body, content_type="application/json", headers=self.headers)


@pytest.fixture
def token_for() -> Callable[..., str]:
    def make(user: User, **kwargs: Any) -> str:
        _token, secret = api_token_create(user=user, name=kwargs.pop("name", "test"), **kwargs)
        return secret

    return make


@pytest.fixture
def as_viewer(viewer: User, token_for: Callable[..., str]) -> ApiClient:
    return ApiClient(token_for(viewer))


@pytest.fixture
def as_operator(operator: User, token_for: Callable[..., str]) -> ApiClient:
    return ApiClient(token_for(operator))


@pytest.fixture
def staff(roles: None) -> User:
    return User.objects.create_superuser("admin", password="admin-pass-123")


@pytest.fixture
def as_staff(staff: User, token_for: Callable[..., str]) -> ApiClient:
    return ApiClient(token_for(staff))


@pytest.fixture
def anonymous() -> ApiClient:
    return ApiClient(None)


def error_of(response: Any) -> dict[str, Any]:
    """The error object, after checking the body has exactly the documented shape."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "fields"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return dict(body["error"])


@pytest.fixture
def make_instance() -> Callable[..., ServerInstance]:
    counter = iter(range(1, 10_000))

    def make(
        profile: ServerProfile, state: str = InstanceState.READY, **fields: Any
    ) -> ServerInstance:
        return ServerInstance.objects.create(
            profile=profile, host=profile.managed_host, port=profile.port, state=state,
            run_id=f"sd-test-{next(counter)}", gpu_ids=list(profile.gpu_ids), **fields,
        )  # fmt: skip

    return make
