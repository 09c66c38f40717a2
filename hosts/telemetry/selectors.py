"""Read-side queries for telemetry: who needs a host's probes, what they scrape, history.

The sample rows built here (``TelemetrySampleRow``) are also the wire format of the live
`telemetry.samples` events (hosts.telemetry.channel), so a snapshot and the events after it have
the same shape: ``{"k": kind, "t": epoch seconds, "i": instance id or null, "d": data}``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

from django.utils import timezone

from benchlib.json_types import JsonObject
from hosts.models import (
    Host,
    InstanceState,
    ServerInstance,
    TelemetryKind,
    TelemetrySample,
    TelemetryWatch,
)
from hosts.models.instances import ACTIVE_STATES
from hosts.telemetry.conf import TelemetrySettings
from hosts.telemetry.sweeps import running_sweeps, sweep_span

# A page gets at most this many points per kind (and per server) in its snapshot.
MAX_SNAPSHOT_POINTS = 3600
# History before a sweep's or instance's start, so the rise is on the chart.
LEAD_IN_S = 30.0
TARGETS = ("hosts", "instances", "sweeps")


@dataclass(frozen=True)
class ScrapeTarget:
    """A server to scrape: a managed instance, or an endpoint profile's server while one of
    its sweeps runs (no instance; its rows are kept with that sweep)."""

    instance_id: int | None
    metrics_url: str
    sweep_id: int | None = None

    @property
    def key(self) -> tuple[int | None, int | None]:
        return (self.instance_id, self.sweep_id)


@dataclass(frozen=True)
class HostPlan:
    """What the host's manager should run now."""

    needed: bool
    scrape: tuple[ScrapeTarget, ...]
    # The sweep running on the host, if any: its rows are kept with it.
    sweep_ids: dict[int, int]
    host_sweep_id: int | None


@dataclass(frozen=True)
class Window:
    host_id: int
    instance_id: int | None
    since: float
    until: float | None
    # An endpoint sweep's page: the server rows it charts are that sweep's (no instance).
    endpoint_sweep_id: int | None = None


class TelemetrySampleRow(TypedDict):
    """One probe reading, keyed short because a page holds thousands of them."""

    k: str  # the probe: "gpu", "host" or "server"
    t: float  # epoch seconds on the dashboard's clock
    i: int | None  # the instance a server reading is of; None for the host's own
    # Free-form per probe: a GPU's figures (nvidia_smi), the host's load (hostload), a
    # server's metrics (prometheus, llamacpp), as each probe reads them.
    d: dict[str, Any]


def sample_as_dict(
    kind: str, t: float, data: dict[str, Any], instance_id: int | None
) -> TelemetrySampleRow:
    return {"k": kind, "t": t, "i": instance_id, "d": data}


def metrics_url(instance: ServerInstance) -> str:
    return instance.base_url.rstrip("/") + "/metrics"


def telemetry_host_plan(*, host_id: int, now: datetime | None = None) -> HostPlan:
    """Needed while the host has an active instance, an open page or a running sweep of an
    endpoint registered on it; READY instances are scraped."""
    now = now or timezone.now()
    instances = list(
        ServerInstance.objects.filter(host_id=host_id, state__in=sorted(ACTIVE_STATES))
        .select_related("profile", "host")
        .order_by("pk")
    )
    watched = TelemetryWatch.objects.filter(host_id=host_id, wanted_until__gt=now).exists()
    sweeps = running_sweeps(host_id)
    sweep_ids = sweeps.ids
    return HostPlan(
        # An endpoint's sweep has no instance to keep the host needed: its running sweep does.
        needed=bool(instances) or watched or bool(sweeps.endpoints),
        scrape=(
            *(
                ScrapeTarget(instance_id=i.pk, metrics_url=metrics_url(i))
                for i in instances
                if i.state == InstanceState.READY
            ),
            *(
                ScrapeTarget(instance_id=None, metrics_url=url, sweep_id=sweep_id)
                for sweep_id, url in sorted(sweeps.endpoint_metrics.items())
            ),
        ),
        sweep_ids=sweeps.by_instance,
        host_sweep_id=min(sweep_ids) if sweep_ids else None,
    )


def telemetry_window(*, target: str, pk: int, now: float | None = None) -> Window | None:
    """The host and time range a page about `target` #pk charts; None when there is none."""
    now = time.time() if now is None else now
    history = TelemetrySettings.load().history_s
    if target == "hosts":
        if not Host.objects.filter(pk=pk).exists():
            return None
        return Window(host_id=pk, instance_id=None, since=now - history, until=None)
    if target == "instances":
        instance = ServerInstance.objects.filter(pk=pk).first()
        if instance is None:
            return None
        start = instance.created_at.timestamp() - LEAD_IN_S
        end = instance.stopped_at.timestamp() + LEAD_IN_S if instance.stopped_at else None
        return Window(
            host_id=instance.host_id,
            instance_id=instance.pk,
            since=start if end is not None else max(start, now - history),
            until=end,
        )
    if target == "sweeps":
        span = sweep_span(pk)
        if span is None:
            return None
        return Window(
            host_id=span.host_id,
            instance_id=span.instance_id,
            since=span.started - LEAD_IN_S,
            until=span.finished + LEAD_IN_S if span.finished is not None else None,
            endpoint_sweep_id=pk if span.instance_id is None else None,
        )
    return None


def telemetry_history(
    *,
    host_id: int,
    since: float,
    until: float | None = None,
    instance_id: int | None = None,
    endpoint_sweep_id: int | None = None,
    limit: int = MAX_SNAPSHOT_POINTS,
) -> list[TelemetrySampleRow]:
    """GPU and host rows of the host, and server rows of `instance_id` (or, for an endpoint,
    of its sweep `endpoint_sweep_id`), oldest first."""
    rows = TelemetrySample.objects.filter(host_id=host_id, t__gte=since)
    if until is not None:
        rows = rows.filter(t__lte=until)
    parts = [
        rows.filter(kind=TelemetryKind.GPU),
        rows.filter(kind=TelemetryKind.HOST),
    ]
    if instance_id is not None:
        parts.append(rows.filter(kind=TelemetryKind.SERVER, instance_id=instance_id))
    elif endpoint_sweep_id is not None:
        parts.append(
            rows.filter(
                kind=TelemetryKind.SERVER, instance__isnull=True, sweep_id=endpoint_sweep_id
            )
        )
    samples: list[TelemetrySampleRow] = []
    for part in parts:
        latest = part.order_by("-t").values_list("kind", "t", "data", "instance_id")[:limit]
        samples += [sample_as_dict(k, t, d, i) for k, t, d, i in latest]
    samples.sort(key=lambda s: s["t"])
    return samples


class TelemetrySnapshot(TypedDict):
    """What a telemetry chart's websocket client gets first: its window and the rows in it,
    and how often to say it is still watching."""

    host_id: int
    instance_id: int | None
    since: float
    until: float | None
    samples: list[TelemetrySampleRow]
    keepalive_s: float
    gpu_interval_ms: int


def telemetry_snapshot(*, window: Window) -> TelemetrySnapshot:
    conf = TelemetrySettings.load()
    return {
        "host_id": window.host_id,
        "instance_id": window.instance_id,
        "since": window.since,
        "until": window.until,
        "samples": telemetry_history(
            host_id=window.host_id,
            since=window.since,
            until=window.until,
            instance_id=window.instance_id,
            endpoint_sweep_id=window.endpoint_sweep_id,
        ),
        "keepalive_s": conf.watch_ttl_s / 3,
        "gpu_interval_ms": conf.gpu_interval_ms,
    }


def telemetry_series(
    *, host_id: int, kind: str, instance_id: int | None = None, since: float = 0.0
) -> list[tuple[float, JsonObject]]:
    """(t, data) of one kind, oldest first (tests, exports); data as its JSON column holds it."""
    rows = TelemetrySample.objects.filter(host_id=host_id, kind=kind, t__gte=since)
    if instance_id is not None:
        rows = rows.filter(instance_id=instance_id)
    return [(t, d) for t, d in rows.order_by("t").values_list("t", "data")]
