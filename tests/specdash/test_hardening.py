"""Requests that used to end in a server error, or answered more than the caller's role
allows: oversized bodies, ids past the database's integers, /static traversal, unknown
websocket routes and non-JSON frames, the role before the body, the Origin's scheme, and a
revoked token in the admin."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from core.models import ApiToken
from core.tokens import api_token_create, api_token_revoke
from hosts.models import Host, ServerInstance, ServerProfile, TelemetryWatch
from specdash.asgi import application

BIG = 3 * 1024 * 1024  # over Django's 2.5 MB DATA_UPLOAD_MAX_MEMORY_SIZE
HUGE_ID = str(2**63)


def _bearer(user: User) -> dict[str, str]:
    _token, secret = api_token_create(user=user, name="t")
    return {"Authorization": f"Bearer {secret}"}


@pytest.mark.django_db
def test_a_body_over_the_limit_answers_413_on_the_api_and_the_pages(
    operator: User, django_user_model: Any
) -> None:
    body = json.dumps({"levels": [1], "notes": "x" * BIG})
    nobody = django_user_model.objects.create_user("nobody", password="nobody-pass-123")
    for user in (operator, nobody):
        response = Client().post(
            "/api/v1/sweeps", body, content_type="application/json", headers=_bearer(user)
        )
        assert response.status_code == 413, response.content[:200]
        assert response.json()["error"]["code"] == "too_large"
    client = Client()
    client.force_login(operator)
    page = client.post("/sweeps/new/", {"notes": "x" * BIG})
    assert page.status_code == 413
    login = Client().post("/accounts/login/", {"username": "x" * BIG, "password": "y"})
    assert login.status_code == 413


@pytest.mark.django_db
def test_compare_and_detail_pages_with_odd_or_huge_ids_answer_a_client_error(
    client: Client, viewer: User
) -> None:
    client.force_login(viewer)
    for query in (
        f"sweeps={HUGE_ID}&sweeps=1",
        f"sweeps=1&sweeps=2&reference={HUGE_ID}",
        "sweeps=%C2%B2&sweeps=1",  # a superscript two: a digit to str.isdigit, not to int
        "sweeps=1&sweeps=2&reference=%C2%B2",
        "sweeps=-1&sweeps=1.5&sweeps=0x10",
    ):
        response = client.get(f"/compare/?{query}")
        assert response.status_code in (200, 400, 404), query
    for path in (
        f"/sweeps/{HUGE_ID}/",
        f"/experiments/{HUGE_ID}/",
        f"/servers/instances/{HUGE_ID}/",
    ):
        assert client.get(path).status_code == 404, path
    for path in ("/compare/table.csv", "/compare/report.html"):
        assert client.get(f"{path}?sweeps={HUGE_ID}&sweeps=1").status_code in (400, 404)


async def test_a_static_path_that_escapes_the_root_is_404_without_login() -> None:
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as web:
        for path in (
            "/static/%2e%2e/%2e%2e/%2e%2e/etc/passwd",
            "/static/..%2f..%2f..%2fetc/passwd",
            "/static/%00",
        ):
            response = await web.get(path)
            assert response.status_code == 404, path
            assert "root:" not in response.text


@pytest.mark.django_db(transaction=True)
async def test_an_unknown_websocket_route_is_closed_as_not_found() -> None:
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1")]
    for path in ("/ws/nothing/here/", "/", "/ws/instances/abc/"):
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await communicator.connect(timeout=10)
        assert (connected, code) == (False, 4404), path


def _cookie(user: User) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


@pytest.fixture
def instance(make_profile: Callable[..., ServerProfile]) -> ServerInstance:
    profile = make_profile()
    return ServerInstance.objects.create(profile=profile, host=profile.managed_host, port=1)


async def _socket(
    instance: ServerInstance, viewer: User, origin: bytes, scheme: str = "ws"
) -> WebsocketCommunicator:
    cookie = await sync_to_async(_cookie)(viewer)
    headers = [(b"origin", origin), (b"host", b"127.0.0.1:8000"), (b"cookie", cookie)]
    communicator = WebsocketCommunicator(
        application, f"/ws/instances/{instance.pk}/", headers=headers
    )
    communicator.scope["scheme"] = scheme
    return communicator


@pytest.mark.django_db(transaction=True)
async def test_a_non_json_frame_is_ignored_and_the_socket_stays_open(
    viewer: User, instance: ServerInstance
) -> None:
    communicator = await _socket(instance, viewer, b"http://127.0.0.1:8000")
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    snapshot = await communicator.receive_json_from(timeout=10)
    assert snapshot["type"] == "snapshot"
    await communicator.send_to(text_data="this is not JSON {")
    await communicator.send_to(bytes_data=b"\xff\x00")
    assert await communicator.receive_nothing(timeout=0.5)
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_the_origin_must_have_the_sockets_scheme(
    viewer: User, instance: ServerInstance
) -> None:
    cases = [
        (b"http://127.0.0.1:8000", "ws", True),
        (b"https://127.0.0.1:8000", "ws", False),  # an https page is not this http one
        (b"https://127.0.0.1:8000", "wss", True),
        (b"http://127.0.0.1:8000", "wss", False),
    ]
    for origin, scheme, expected in cases:
        communicator = await _socket(instance, viewer, origin, scheme)
        connected, _ = await communicator.connect(timeout=10)
        assert connected is expected, (origin, scheme)
        await communicator.disconnect()


@pytest.mark.django_db
def test_the_role_is_checked_before_the_body(
    viewer: User, operator: User, django_user_model: Any
) -> None:
    nobody = django_user_model.objects.create_user("nobody", password="nobody-pass-123")
    bad = {"levels": "not a list", "load": 5}
    for user, expected in ((nobody, 403), (viewer, 403), (operator, 422)):
        response = Client().post(
            "/api/v1/sweeps", bad, content_type="application/json", headers=_bearer(user)
        )
        assert response.status_code == expected, (user.username, response.content)
        if expected == 403:
            assert "levels" not in response.content.decode()
    # A read with a bad query: a user without a role learns nothing either.
    response = Client().get("/api/v1/sweeps?limit=abc", headers=_bearer(nobody))
    assert response.status_code == 403


@pytest.mark.django_db
def test_a_revoked_token_stays_revoked_in_the_admin(operator: User, roles: None) -> None:
    token, _secret = api_token_create(user=operator, name="ci")
    api_token_revoke(token=token)
    admin = User.objects.create_superuser("admin", password="admin-pass-123")
    client = Client()
    client.force_login(admin)
    url = f"/admin/core/apitoken/{token.pk}/change/"
    assert 'name="revoked_at' not in client.get(url).content.decode()
    client.post(url, {"name": "ci", "expires_at": "", "revoked_at_0": "", "revoked_at_1": ""})
    assert ApiToken.objects.get(pk=token.pk).revoked_at is not None


@pytest.mark.django_db(transaction=True)
async def test_junk_frames_are_ignored_and_a_keepalive_after_them_still_renews_the_watch(
    operator: User, local_host: Host
) -> None:
    cookie = await sync_to_async(_cookie)(operator)
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)]
    communicator = WebsocketCommunicator(
        application, f"/ws/telemetry/hosts/{local_host.pk}/", headers=headers
    )
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    await communicator.receive_json_from(timeout=10)  # the snapshot
    long_ago = timezone.now() - timedelta(hours=1)
    await TelemetryWatch.objects.filter(host=local_host).aupdate(wanted_until=long_ago)
    await communicator.send_to(text_data="{not json")
    await communicator.send_to(bytes_data=b"\x00")
    await communicator.send_json_to({"type": "keepalive"})
    deadline = asyncio.get_running_loop().time() + 10
    while (await TelemetryWatch.objects.aget(host=local_host)).wanted_until <= long_ago:
        assert asyncio.get_running_loop().time() < deadline, "the keepalive was not honoured"
        await asyncio.sleep(0.05)
    await communicator.disconnect()
