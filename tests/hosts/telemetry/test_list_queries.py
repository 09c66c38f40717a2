"""The telemetry history a chart opens with costs the same number of queries however many
samples it returns (one per kind, not one per sample)."""

from __future__ import annotations

import itertools
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from hosts.models import (
    Host,
    HostKind,
    InstanceState,
    ServerInstance,
    ServerProfile,
    TelemetryKind,
    TelemetrySample,
)
from hosts.telemetry.selectors import TelemetrySampleRow, telemetry_history

_t = itertools.count(1)


def _add_samples(host: Host, instance: ServerInstance, count: int) -> None:
    for _ in range(count):
        t = float(next(_t))
        TelemetrySample.objects.create(host=host, kind=TelemetryKind.GPU, t=t, data={"g": 1})
        TelemetrySample.objects.create(host=host, kind=TelemetryKind.HOST, t=t, data={"l": 1})
        TelemetrySample.objects.create(
            host=host, instance=instance, kind=TelemetryKind.SERVER, t=t, data={"r": 1}
        )


def _queries(host: Host, instance: ServerInstance) -> tuple[int, list[TelemetrySampleRow]]:
    with CaptureQueriesContext(connection) as ctx:
        samples = telemetry_history(host_id=host.pk, since=0.0, instance_id=instance.pk)
    return len(ctx.captured_queries), samples


def test_telemetry_history_queries_do_not_grow_with_samples(db: Any) -> None:
    host = Host.objects.create(name="gpu box", kind=HostKind.LOCAL)
    profile = ServerProfile.objects.create(
        name="p", host=host, port=30000, launch_argv=["serve"], gpu_ids=[0]
    )
    instance = ServerInstance.objects.create(
        profile=profile, host=host, port=30000, state=InstanceState.READY, run_id="sd-tele-q"
    )
    _add_samples(host, instance, 1)
    one, first = _queries(host, instance)
    _add_samples(host, instance, 4)
    five, then = _queries(host, instance)
    assert (len(first), len(then)) == (3, 15)
    assert five == one
