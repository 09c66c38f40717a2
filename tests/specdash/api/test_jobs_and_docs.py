"""Jobs, the OpenAPI schema and the interactive docs (served without any CDN)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core.jobs import job_enqueue
from tests.specdash.api.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db


def test_a_job_is_readable_by_id_and_listed_by_kind(as_viewer: ApiClient) -> None:
    run = job_enqueue(kind="server.run", params={"instance_id": 3})
    job_enqueue(kind="sweep.run", params={"sweep_id": 1})
    body = as_viewer.get(f"/api/v1/jobs/{run.pk}").json()
    assert (body["kind"], body["state"], body["params"]) == (
        "server.run",
        "queued",
        {"instance_id": 3},
    )
    kinds = [j["kind"] for j in as_viewer.get("/api/v1/jobs", kind="server.run").json()["items"]]
    assert kinds == ["server.run"]
    missing = as_viewer.get("/api/v1/jobs/9999")
    assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"


def test_the_schema_needs_authentication(anonymous: ApiClient, as_viewer: ApiClient) -> None:
    refused = anonymous.get("/api/v1/openapi.json")
    assert refused.status_code == 401 and error_of(refused)["code"] == "not_authenticated"
    schema = as_viewer.get("/api/v1/openapi.json").json()
    assert schema["info"]["title"] == "specdash API"
    assert "/api/v1/sweeps" in schema["paths"]


def test_the_schema_and_docs_need_a_role(
    client: Client, django_user_model: type[User], token_for: Callable[..., str]
) -> None:
    nobody = django_user_model.objects.create_user("nobody")
    refused = ApiClient(token_for(nobody)).get("/api/v1/openapi.json")
    assert refused.status_code == 403 and error_of(refused)["code"] == "permission_denied"
    client.force_login(nobody)
    assert client.get("/api/v1/docs").status_code == 403
    assert b"/api/v1/sweeps" not in client.get("/api/v1/docs").content


def test_the_docs_page_sends_anonymous_browsers_to_the_login(client: Client) -> None:
    response = client.get("/api/v1/docs")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def _asset_urls(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"]+)"', html)


def test_the_docs_reference_no_external_host(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    response = client.get("/api/v1/docs")
    assert response.status_code == 200
    html = response.content.decode()
    urls = _asset_urls(html)
    assert len(urls) >= 3
    assert all(u.startswith("/") and not u.startswith("//") for u in urls), urls
    assert "cdn" not in html.lower() and "https://" not in html and "http://" not in html
    for url in urls:
        asset = client.get(url)
        assert asset.status_code == 200, url
        body = b"".join(asset.streaming_content)  # type: ignore[attr-defined]
        assert len(body) > 100
    css = client.get("/api/v1/docs/assets/swagger-ui.css")
    assert css["Content-Type"].startswith("text/css")


def test_only_the_bundled_docs_assets_are_served(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    assert client.get("/api/v1/docs/assets/redoc.standalone.js").status_code == 404
    assert client.get("/api/v1/docs/assets/..%2F..%2Fmain.py").status_code == 404


def test_the_swagger_init_script_sends_the_csrf_token(client: Client, viewer: User) -> None:
    # Swagger's "Try it out" uses the session: its requests must carry the CSRF header.
    client.force_login(viewer)
    html = client.get("/api/v1/docs").content.decode()
    assert 'data-api-csrf="true"' in html
    assert re.search(r'data-csrf-token="[A-Za-z0-9]{32,}"', html)
    init = b"".join(
        client.get("/api/v1/docs/assets/swagger-ui-init.js").streaming_content  # type: ignore[attr-defined]
    )
    assert b"X-CSRFToken" in init
