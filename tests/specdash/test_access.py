"""Every URL and websocket route refuses anonymous clients; roles separate reading from acting.

The routes are discovered from the URL resolver and the websocket router, so a new route is
covered without editing this file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from core.models import Job
from hosts.models import ServerInstance
from specdash.asgi import application
from specdash.routing import websocket_urlpatterns

SAMPLE_VALUES = {
    "int": "1",
    "str": "x",
    "slug": "x",
    "uuid": "00000000-0000-0000-0000-000000000001",
    "path": "x",
}
# Login and logout are the two pages an anonymous user must reach.
PUBLIC_NAMES = {"login", "logout"}


def _route_to_path(route: str) -> str:
    def sub(match: re.Match[str]) -> str:
        converter = match.group(1) or "str"
        return SAMPLE_VALUES.get(converter, "1")

    return re.sub(r"<(?:(\w+):)?\w+>", sub, route)


def _regex_to_path(regex: str) -> str:
    # Admin URLs are regex-based: replace groups with a sample value, drop anchors.
    text = re.sub(r"\(\?P<\w+>[^)]*\)", "1", regex)
    text = re.sub(r"\([^)]*\)", "x", text)
    return text.replace("^", "").replace("$", "").replace("\\", "").replace("?", "")


def _pattern_text(pattern: Any) -> str:
    if hasattr(pattern.pattern, "_route"):
        return _route_to_path(pattern.pattern._route)
    return _regex_to_path(pattern.pattern.regex.pattern)


def iter_url_paths(
    patterns: list[Any] | None = None, prefix: str = "/"
) -> Iterator[tuple[str, str | None]]:
    for pattern in patterns if patterns is not None else get_resolver().url_patterns:
        piece = _pattern_text(pattern)
        if isinstance(pattern, URLResolver):
            yield from iter_url_paths(pattern.url_patterns, prefix + piece)
        elif isinstance(pattern, URLPattern):
            yield prefix + piece, pattern.name


ALL_URLS = sorted(set(iter_url_paths()))
# Login and logout are the two pages an anonymous user must reach: every other route is checked.
PROTECTED_URLS = [(path, name) for path, name in ALL_URLS if name not in PUBLIC_NAMES]


def test_the_route_walk_finds_the_apps_routes() -> None:
    paths = {p for p, _ in ALL_URLS}
    assert "/servers/" in paths
    assert "/servers/instances/1/stop/" in paths
    assert any(p.startswith("/admin/") for p in paths)
    assert len(ALL_URLS) > 20


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "name"), PROTECTED_URLS)
def test_anonymous_client_is_refused_everywhere(
    client: Client, path: str, name: str | None
) -> None:
    for method in ("get", "post"):
        response = getattr(client, method)(path)
        assert response.status_code in {301, 302, 401, 403, 404, 405}, (
            method,
            path,
            response.status_code,
        )
        if response.status_code in {301, 302}:
            assert "login" in response["Location"], (method, path, response["Location"])


@pytest.mark.django_db
def test_login_page_is_public(client: Client) -> None:
    assert client.get("/accounts/login/").status_code == 200


@pytest.mark.django_db
def test_only_the_login_and_logout_pages_are_left_out_of_the_anonymous_check(
    client: Client,
) -> None:
    public = {path: client.post(path) for path, name in ALL_URLS if name in PUBLIC_NAMES}
    assert sorted(public) == [
        "/accounts/login/", "/accounts/logout/", "/admin/login/", "/admin/logout/",
    ]  # fmt: skip
    # The login forms answer an anonymous client; logging out sends it back to log in.
    assert {path: r.status_code for path, r in public.items()} == {
        "/accounts/login/": 200, "/accounts/logout/": 302, "/admin/login/": 200,
        "/admin/logout/": 302,
    }  # fmt: skip


def _ws_paths() -> list[str]:
    return [_route_to_path(p.pattern._route) for p in websocket_urlpatterns]


def test_every_websocket_route_is_covered() -> None:
    assert "ws/instances/1/" in _ws_paths()
    assert "ws/sweeps/1/" in _ws_paths()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", _ws_paths())
async def test_anonymous_websocket_is_refused(path: str) -> None:
    communicator = WebsocketCommunicator(
        application, "/" + path, headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
    )
    connected, _code = await communicator.connect()
    assert not connected
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", _ws_paths())
async def test_a_websocket_of_a_user_without_a_role_is_refused_as_forbidden(
    path: str, django_user_model: Any
) -> None:
    nobody = await django_user_model.objects.acreate(username="nobody")
    cookie = await sync_to_async(_viewer_cookie)(nobody)
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)]
    communicator = WebsocketCommunicator(application, "/" + path, headers=headers)
    connected, code = await communicator.connect(timeout=10)
    assert (connected, code) == (False, 4403)


@pytest.mark.django_db(transaction=True)
async def test_websocket_from_a_foreign_origin_is_refused() -> None:
    communicator = WebsocketCommunicator(
        application, "/ws/instances/1/", headers=[(b"origin", b"http://evil.example")]
    )
    connected, _ = await communicator.connect()
    assert not connected


def _viewer_cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def _opens(origin: bytes, host: bytes, cookie: bytes) -> bool:
    headers = [(b"origin", origin), (b"host", host), (b"cookie", cookie)]
    communicator = WebsocketCommunicator(application, "/ws/instances/1/", headers=headers)
    connected, _ = await communicator.connect(timeout=10)
    await communicator.disconnect()
    return connected


@pytest.mark.django_db(transaction=True)
async def test_a_websocket_from_another_port_of_an_allowed_host_is_refused(
    viewer: Any, make_profile: Any
) -> None:
    profile = await sync_to_async(make_profile)()
    await ServerInstance.objects.acreate(pk=1, profile=profile, host_id=profile.host_id, port=1)
    cookie = await sync_to_async(_viewer_cookie)(viewer)
    # The page the dashboard served opens its socket; a page on another port does not.
    assert await _opens(b"http://127.0.0.1:8000", b"127.0.0.1:8000", cookie)
    assert await _opens(b"http://[::1]:8000", b"[::1]:8000", cookie)
    assert not await _opens(b"http://127.0.0.1:9999", b"127.0.0.1:8000", cookie)
    assert not await _opens(b"http://127.0.0.1", b"127.0.0.1:8000", cookie)
    assert not await _opens(b"http://evil.example:8000", b"evil.example:8000", cookie)


@pytest.mark.django_db
def test_a_user_without_a_role_cannot_read(client: Client, django_user_model: Any) -> None:
    django_user_model.objects.create_user("nobody", password="nobody-pass-123")
    client.force_login(django_user_model.objects.get(username="nobody"))
    assert client.get("/servers/").status_code == 403


@pytest.mark.django_db
def test_viewer_reads_but_cannot_start(client: Client, viewer: Any, make_profile: Any) -> None:
    profile = make_profile()
    client.force_login(viewer)
    assert client.get("/servers/").status_code == 200
    assert client.get("/").status_code == 200
    response = client.post(f"/servers/profiles/{profile.pk}/start/")
    assert response.status_code == 403
    assert not ServerInstance.objects.exists()
    assert b'data-testid="start-' not in client.get("/servers/").content


@pytest.mark.django_db
def test_operator_start_creates_an_instance_and_queues_its_job(
    client: Client, operator: Any, make_profile: Any
) -> None:
    profile = make_profile()
    client.force_login(operator)
    response = client.post(f"/servers/profiles/{profile.pk}/start/")
    instance = ServerInstance.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/servers/instances/{instance.pk}/"
    assert instance.state == "starting"
    assert instance.started_by == operator
    job = Job.objects.get()
    assert (job.kind, job.params, job.state) == (
        "server.run",
        {"instance_id": instance.pk},
        "queued",
    )
    assert instance.events.get().actor == operator


@pytest.mark.django_db
def test_start_is_post_only(client: Client, operator: Any, make_profile: Any) -> None:
    profile = make_profile()
    client.force_login(operator)
    assert client.get(f"/servers/profiles/{profile.pk}/start/").status_code == 405


# What a logged-in user without a role may open: their own token page (a token carries
# exactly its owner's roles, so it grants nothing), the docs' static assets, and the way out.
NO_ROLE_NAMES = PUBLIC_NAMES | {"account-tokens", "account-token-revoke", "api-docs-asset"}
ROLE_URLS = [(path, name) for path, name in ALL_URLS if name not in NO_ROLE_NAMES]


@pytest.mark.django_db
def test_what_a_user_without_a_role_may_open_is_their_token_page_the_docs_assets_and_the_way_out(
    client: Client, django_user_model: Any
) -> None:
    client.force_login(django_user_model.objects.create_user("nobody"))
    opened = {
        path: client.get(path).status_code
        for path, name in ALL_URLS
        if name in NO_ROLE_NAMES - PUBLIC_NAMES
    }
    # Their token page; a revoke is POST only; the docs asset "x" does not exist.
    assert opened == {
        "/account/tokens/": 200, "/account/tokens/1/revoke/": 405, "/api/v1/docs/assets/x": 404,
    }  # fmt: skip


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "name"), ROLE_URLS)
def test_a_logged_in_user_without_a_role_reads_nothing(
    client: Client, django_user_model: Any, path: str, name: str | None
) -> None:
    client.force_login(django_user_model.objects.create_user("nobody"))
    response = client.get(path)
    # 422: an API operation whose required query is missing refuses before its role check,
    # which is fine as long as no data comes back.
    assert response.status_code in {302, 401, 403, 404, 405, 422}, (path, response.status_code)
    if response.status_code == 302:
        # Only the admin answers a non-staff user with its own login form.
        assert response["Location"].startswith("/admin/login/"), (path, response["Location"])
