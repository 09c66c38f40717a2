from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from benchmarks.sweeps import recording, services
from benchmarks.sweeps.channel import SWEEP_SAMPLES
from core import realtime
from specdash.asgi import application
from tests.benchmarks.conftest import load, sample_event

pytestmark = pytest.mark.django_db(transaction=True)

ORIGIN = (b"origin", b"http://127.0.0.1")
HOST = (b"host", b"127.0.0.1")


def _session_cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()


async def _connect(
    path: str, cookie: bytes | None = None
) -> tuple[WebsocketCommunicator, bool, Any]:
    headers = [ORIGIN, HOST] + ([(b"cookie", cookie)] if cookie else [])
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await communicator.connect(timeout=10)
    return communicator, connected, code


async def test_anonymous_connection_is_refused(ready_instance: Any) -> None:
    sweep = await sync_to_async(services.sweep_create)(
        instance=ready_instance, levels=[1], load=load()
    )
    communicator, connected, code = await _connect(f"/ws/sweeps/{sweep.pk}/")
    assert not connected and code == 4401
    await communicator.disconnect()


async def test_viewer_gets_the_snapshot_first_then_live_events(
    viewer: Any, ready_instance: Any
) -> None:
    sweep = await sync_to_async(services.sweep_create)(
        instance=ready_instance, levels=[1, 2], load=load()
    )
    await sync_to_async(recording.sweep_begin)(sweep_id=sweep.pk)
    await sync_to_async(recording.sweep_samples_add)(
        sweep_id=sweep.pk, samples=[sample_event(0, 10.0)]
    )
    cookie = await sync_to_async(_session_cookie)(viewer)
    communicator, connected, _ = await _connect(f"/ws/sweeps/{sweep.pk}/", cookie)
    assert connected
    snapshot = await communicator.receive_json_from(timeout=10)
    assert snapshot["type"] == "snapshot"
    assert snapshot["sweep"]["id"] == sweep.pk and snapshot["sweep"]["state"] == "running"
    assert snapshot["sweep"]["levels"] == [1, 2]
    assert [s["t"] for s in snapshot["samples"]] == [10.0] and snapshot["samples"][0][
        "tok_s"
    ] == 100.0
    assert snapshot["progress"]["level_count"] == 2

    await realtime.abroadcast(
        realtime.sweep_group(sweep.pk), SWEEP_SAMPLES.name,
        {"sweep_id": sweep.pk, "samples": [sample_event(0, 11.0)]},
    )  # fmt: skip
    message = await communicator.receive_json_from(timeout=10)
    assert message["type"] == "sweep.samples" and message["samples"][0]["t"] == 11.0

    # A service running in a worker thread reaches the client after its commit.
    await sync_to_async(recording.sweep_level_started)(
        sweep_id=sweep.pk, index=0, concurrency=1, t=12.0
    )
    message = await communicator.receive_json_from(timeout=10)
    assert message["type"] == "sweep.level" and message["sweep_id"] == sweep.pk
    assert message["level"]["concurrency"] == 1 and message["level"]["state"] == "running"
    assert message["progress"]["level_number"] == 1
    await communicator.disconnect()


async def test_unknown_sweep_is_closed_with_not_found(viewer: Any) -> None:
    cookie = await sync_to_async(_session_cookie)(viewer)
    communicator, connected, code = await _connect("/ws/sweeps/424242/", cookie)
    assert not connected and code == 4404
    await communicator.disconnect()
