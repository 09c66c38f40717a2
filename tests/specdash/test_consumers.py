"""A live page subscribes before it reads the state it draws first, so an event committed
while the snapshot is being built reaches the viewer. The event is injected deterministically
by wrapping the selector the consumer builds its snapshot with: it commits the event just
before or just after it reads the state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from hosts import selectors, services
from hosts.lifecycle import steps
from hosts.models import Host, InstanceState, ServerInstance
from hosts.telemetry import service as telemetry_service
from hosts.telemetry.probes import Sample
from specdash.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

GPU = {"index": [0], "used": [10], "total": [100], "util": [5], "power": [1.0], "temp": [30]}


def _cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode()


async def _open(path: str, user: Any) -> WebsocketCommunicator:
    cookie = await sync_to_async(_cookie)(user)
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)]
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await communicator.connect(timeout=10)
    assert connected, code
    return communicator


def _around(read: Callable[..., Any], commit: Callable[[], None], *, first: bool) -> Any:
    def wrapped(**kwargs: Any) -> Any:
        if first:
            commit()
        state = read(**kwargs)
        if not first:
            commit()
        return state

    return wrapped


@pytest.mark.parametrize("commit_first", [False, True], ids=["after-the-read", "before-the-read"])
async def test_an_instance_event_committed_while_the_snapshot_is_built_is_delivered(
    viewer: Any, make_profile: Any, monkeypatch: pytest.MonkeyPatch, commit_first: bool
) -> None:
    profile = await sync_to_async(make_profile)()
    instance = await ServerInstance.objects.acreate(
        profile=profile, host=profile.host, port=profile.port, state=InstanceState.READY,
        run_id="sd-consumer-test",
    )  # fmt: skip

    def commit() -> None:
        services.instance_record_event(instance=instance, message="in between")

    monkeypatch.setattr(
        selectors,
        "instance_snapshot",
        _around(selectors.instance_snapshot, commit, first=commit_first),
    )
    communicator = await _open(f"/ws/instances/{instance.pk}/", viewer)
    snapshot = await communicator.receive_json_from(timeout=10)
    assert snapshot["type"] == "snapshot"
    shown = [e["message"] for e in snapshot["events"]]
    assert shown == (["in between"] if commit_first else [])
    event = await communicator.receive_json_from(timeout=10)
    assert event["type"] == "instance.event" and event["message"] == "in between"
    # The page tells a repeat from a new event by its id.
    if commit_first:
        assert event["id"] == snapshot["events"][0]["id"]
    await communicator.disconnect()


async def test_a_readiness_stage_probed_before_the_socket_subscribed_is_in_its_snapshot(
    viewer: Any, make_profile: Any
) -> None:
    """The stage is broadcast once, when it changes: a page whose socket subscribes later
    (a slow page load, a reconnect) learns it from the snapshot, not from a live event."""
    profile = await sync_to_async(make_profile)()
    instance = await ServerInstance.objects.acreate(
        profile=profile, host=profile.host, port=profile.port, state=InstanceState.LOADING,
        run_id="sd-readiness-test",
    )  # fmt: skip
    plan = await sync_to_async(steps.load_plan)(instance.pk)
    await sync_to_async(steps.readiness_progress)(plan, "health", "/health answered 503")
    communicator = await _open(f"/ws/instances/{instance.pk}/", viewer)
    snapshot = await communicator.receive_json_from(timeout=10)
    assert snapshot["type"] == "snapshot"
    assert snapshot["instance"]["readiness"] == "health /health answered 503"
    # A later stage arrives live, and is stored for the next subscriber.
    await sync_to_async(steps.readiness_progress)(plan, "models", "'tiny' not in []")
    live = await communicator.receive_json_from(timeout=10)
    assert live == {"type": "instance.readiness", "stage": "models", "detail": "'tiny' not in []"}
    await communicator.disconnect()
    assert (
        await ServerInstance.objects.aget(pk=instance.pk)
    ).readiness == "models 'tiny' not in []"


SOCKET_SECRETS = ("k1-secret", "proxy-secret", "hf-secret")


async def test_a_viewers_instance_socket_gets_reason_evidence_and_readiness_masked(
    viewer: Any, make_profile: Any
) -> None:
    """The page masks them as it renders them; the socket's rows must not carry them in clear
    to the same viewer (a holder's command line with --api-key, a reason quoting a URL)."""
    profile = await sync_to_async(make_profile)()
    instance = await ServerInstance.objects.acreate(
        profile=profile, host=profile.host, port=profile.port, state=InstanceState.LOADING,
        run_id="sd-masked-socket-test",
        reason="bind failed: env HF_TOKEN=hf-secret",
        readiness="models 'https://u:proxy-secret@hub.example/m' not in []",
        evidence={"holders": [{"pid": 7, "cmdline": ["llama-server", "--api-key", "k1-secret"]}]},
    )  # fmt: skip
    communicator = await _open(f"/ws/instances/{instance.pk}/", viewer)
    snapshot = await communicator.receive_json_from(timeout=10)
    row = snapshot["instance"]
    assert row["evidence"]["holders"][0]["cmdline"] == ["llama-server", "--api-key", "***"]
    assert row["reason"] == "bind failed: env HF_TOKEN=***"
    assert row["readiness"] == "models 'https://u:***@hub.example/m' not in []"
    await sync_to_async(services.instance_transition)(
        instance_id=instance.pk, state=InstanceState.FAILED, reason="crashed: --api-key k1-secret"
    )
    while (event := await communicator.receive_json_from(timeout=10))["type"] != "instance.state":
        pass
    assert event["instance"]["reason"] == "crashed: --api-key ***"
    for secret in SOCKET_SECRETS:
        assert secret not in str(snapshot) + str(event), secret
    await communicator.disconnect()


# What SGLang writes at start (its ServerArgs' repr) and what a dict-printing server writes.
SGLANG_LOG = "server_args=ServerArgs(model_path='/m', api_key='k1-secret', max_total_tokens=4096)"
DICT_LOG = "non-default args: {'model': '/m', 'hf_token': 'hf-secret'}"


async def test_a_viewers_instance_socket_gets_the_servers_log_masked(
    viewer: Any, make_profile: Any
) -> None:
    """A server that prints its key in its log must not show it to a viewer: not in the
    snapshot, nor in the log event the lifecycle job sends when it reads a new tail."""
    profile = await sync_to_async(make_profile)()
    instance = await ServerInstance.objects.acreate(
        profile=profile, host=profile.host, port=profile.port, state=InstanceState.LOADING,
        run_id="sd-masked-log-test", log_tail=SGLANG_LOG,
    )  # fmt: skip
    communicator = await _open(f"/ws/instances/{instance.pk}/", viewer)
    snapshot = await communicator.receive_json_from(timeout=10)
    assert snapshot["log_tail"] == (
        "server_args=ServerArgs(model_path='/m', api_key='***', max_total_tokens=4096)"
    )
    plan = await sync_to_async(steps.load_plan)(instance.pk)
    status: Any = {"log": {"lines": [SGLANG_LOG, DICT_LOG]}}
    await sync_to_async(steps.update_log)(plan, status)
    while (event := await communicator.receive_json_from(timeout=10))["type"] != "instance.log":
        pass
    assert (
        event["log_tail"].splitlines()[1] == "non-default args: {'model': '/m', 'hf_token': '***'}"
    )
    for secret in SOCKET_SECRETS:
        assert secret not in str(snapshot) + str(event), secret
    await communicator.disconnect()


async def test_a_telemetry_batch_recorded_after_the_snapshot_was_read_is_delivered(
    viewer: Any, local_host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    def commit() -> None:
        telemetry_service.telemetry_samples_record(
            host_id=local_host.pk, samples=[Sample(kind="gpu", t=9.0, data=GPU)]
        )

    monkeypatch.setattr(
        telemetry_service,
        "telemetry_subscribe",
        _around(telemetry_service.telemetry_subscribe, commit, first=False),
    )
    communicator = await _open(f"/ws/telemetry/hosts/{local_host.pk}/", viewer)
    snapshot = await communicator.receive_json_from(timeout=10)
    assert snapshot["type"] == "snapshot" and snapshot["samples"] == []
    live = await communicator.receive_json_from(timeout=10)
    assert live["type"] == "telemetry.samples" and [s["t"] for s in live["samples"]] == [9.0]
    await communicator.disconnect()
