"""Persisting, broadcasting, claiming and pruning telemetry."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.test import Client

from core import realtime
from core.models import Job, JobState
from hosts.models import Host, TelemetrySample, TelemetryWatch
from hosts.telemetry import selectors, service
from hosts.telemetry.channel import TELEMETRY_SAMPLES
from hosts.telemetry.probes import Sample
from specdash.asgi import application

GPU = {"index": [0, 1], "used": [10, 20], "total": [100, 100], "util": [5, 6],
       "power": [1.0, 2.0], "temp": [30, 31]}  # fmt: skip


def _gpu(t: float, instance_id: int | None = None) -> Sample:
    return Sample(kind="gpu", t=t, data=GPU, instance_id=instance_id)


@pytest.mark.django_db(transaction=True)
async def test_a_batch_is_stored_in_one_go_and_broadcast_as_one_event(local_host: Host) -> None:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(realtime.telemetry_group(local_host.pk), channel)
    samples = [_gpu(1.0), Sample(kind="host", t=1.1, data={"cpu": 3.0})]
    await sync_to_async(service.telemetry_samples_record)(host_id=local_host.pk, samples=samples)
    message = await layer.receive(channel)
    assert message["type"] == TELEMETRY_SAMPLES.name
    assert [s["k"] for s in message["payload"]["samples"]] == ["gpu", "host"]
    assert await TelemetrySample.objects.filter(host=local_host).acount() == 2


@pytest.mark.django_db
def test_ensure_queues_one_telemetry_job_per_host(local_host: Host) -> None:
    assert service.telemetry_host_ensure(host_id=local_host.pk)
    assert not service.telemetry_host_ensure(host_id=local_host.pk)
    job = Job.objects.get(kind=service.TELEMETRY_JOB)
    assert job.lock_key == f"telemetry:host:{local_host.pk}" and job.state == JobState.QUEUED


@pytest.mark.django_db
def test_a_watch_makes_the_host_needed_until_it_expires(local_host: Host) -> None:
    assert not selectors.telemetry_host_plan(host_id=local_host.pk).needed
    service.telemetry_watch(host_id=local_host.pk)
    assert selectors.telemetry_host_plan(host_id=local_host.pk).needed
    watch = TelemetryWatch.objects.get(host=local_host)
    after_expiry = watch.wanted_until + timedelta(seconds=1)
    assert not selectors.telemetry_host_plan(host_id=local_host.pk, now=after_expiry).needed


@pytest.mark.django_db
def test_prune_deletes_past_retention_and_thins_old_rows_but_keeps_recent_ones(
    local_host: Host, settings: Any
) -> None:
    settings.SPECDASH_TELEMETRY_RETENTION_S = 1000
    settings.SPECDASH_TELEMETRY_DOWNSAMPLE_AFTER_S = 100
    settings.SPECDASH_TELEMETRY_DOWNSAMPLE_STEP_S = 10
    now = 10_000.0
    times = [now - 2000, *[now - 500 + i for i in range(30)], *[now - 50 + i for i in range(5)]]
    service.telemetry_samples_record(host_id=local_host.pk, samples=[_gpu(t) for t in times])
    service.telemetry_prune(host_id=local_host.pk, now=now, thinned_until=now - 1000)
    left = sorted(TelemetrySample.objects.values_list("t", flat=True))
    assert now - 2000 not in left  # past retention
    assert [t for t in left if t < now - 100] == [now - 500, now - 490, now - 480]
    assert [t for t in left if t >= now - 100] == [now - 50 + i for i in range(5)]


def _cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    name = django_settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}".encode()


@pytest.mark.django_db(transaction=True)
async def test_a_viewer_gets_history_then_live_batches_without_starting_probes(
    viewer: Any, local_host: Host
) -> None:
    await sync_to_async(service.telemetry_samples_record)(
        host_id=local_host.pk, samples=[_gpu(time.time() - 5)]
    )
    cookie = await sync_to_async(_cookie)(viewer)
    communicator = WebsocketCommunicator(
        application, f"/ws/telemetry/hosts/{local_host.pk}/",
        headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)],
    )  # fmt: skip
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    snapshot = await communicator.receive_json_from(timeout=10)
    assert snapshot["type"] == "snapshot" and len(snapshot["samples"]) == 1
    # A viewer only reads: opening the page neither claims nor starts the host's probes.
    assert not await Job.objects.filter(kind=service.TELEMETRY_JOB).aexists()
    assert not await TelemetryWatch.objects.filter(host=local_host).aexists()
    await sync_to_async(service.telemetry_samples_record)(
        host_id=local_host.pk, samples=[_gpu(9.0)]
    )
    live = await communicator.receive_json_from(timeout=10)
    assert live["type"] == "telemetry.samples" and live["samples"][0]["t"] == 9.0
    await communicator.send_json_to({"type": "keepalive"})
    await communicator.disconnect()
    assert not await TelemetryWatch.objects.filter(host=local_host).aexists()


@pytest.mark.django_db(transaction=True)
async def test_an_operators_page_claims_the_hosts_probes(operator: Any, local_host: Host) -> None:
    cookie = await sync_to_async(_cookie)(operator)
    communicator = WebsocketCommunicator(
        application, f"/ws/telemetry/hosts/{local_host.pk}/",
        headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)],
    )  # fmt: skip
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    await communicator.receive_json_from(timeout=10)
    assert await Job.objects.filter(kind=service.TELEMETRY_JOB, state=JobState.QUEUED).aexists()
    assert await TelemetryWatch.objects.filter(host=local_host).aexists()
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_page_about_nothing_is_refused(viewer: Any) -> None:
    cookie = await sync_to_async(_cookie)(viewer)
    communicator = WebsocketCommunicator(
        application, "/ws/telemetry/sweeps/999/",
        headers=[(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"), (b"cookie", cookie)],
    )  # fmt: skip
    connected, code = await communicator.connect(timeout=10)
    assert not connected and code == 4404
