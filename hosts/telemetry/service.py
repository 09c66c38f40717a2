"""Write-side telemetry actions: persist + broadcast samples, page watches, probes, pruning.

Samples are written in one `bulk_create` per batch (about once a second per host) and sent,
after commit, as one `telemetry.samples` event to the host's telemetry group.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from core import realtime
from core.jobs import job_enqueue
from core.models import Job, JobState
from core.roles import can_operate
from hosts.models import TelemetrySample, TelemetryWatch
from hosts.telemetry import selectors
from hosts.telemetry.channel import TELEMETRY_SAMPLES, TelemetrySamplesPayload
from hosts.telemetry.conf import TelemetrySettings
from hosts.telemetry.probes import Sample
from hosts.telemetry.selectors import TelemetrySnapshot

TELEMETRY_JOB = "telemetry.host"
_DELETE_CHUNK = 500
# A manager that starts re-thins only this far back before the thinning cutoff: anything older
# was thinned by an earlier run (or is deleted at the end of its retention anyway).
RETHIN_S = 2 * 3600.0


def telemetry_lock_key(host_id: int) -> str:
    return f"telemetry:host:{host_id}"


def telemetry_samples_record(
    *,
    host_id: int,
    samples: Sequence[Sample],
    sweep_ids: Mapping[int, int] | None = None,
    host_sweep_id: int | None = None,
) -> int:
    """Store one batch of a host's samples and send it as one event; returns the count."""
    if not samples:
        return 0
    sweep_ids = sweep_ids or {}
    rows = [
        TelemetrySample(
            host_id=host_id,
            instance_id=s.instance_id,
            sweep_id=s.sweep_id
            or (sweep_ids.get(s.instance_id) if s.instance_id is not None else host_sweep_id),
            t=s.t,
            kind=s.kind,
            data=s.data,
        )
        for s in samples
    ]
    with transaction.atomic():
        TelemetrySample.objects.bulk_create(rows)
        payload: TelemetrySamplesPayload = {
            "host_id": host_id,
            "sent_at": time.time(),
            "samples": [
                selectors.sample_as_dict(s.kind, s.t, s.data, s.instance_id) for s in samples
            ],
        }
        TELEMETRY_SAMPLES.broadcast_on_commit(realtime.telemetry_group(host_id), payload)
    return len(rows)


def telemetry_host_ensure(*, host_id: int) -> bool:
    """Queue the host's telemetry job unless one is queued or running; True if queued now."""
    lock = telemetry_lock_key(host_id)
    if Job.objects.filter(lock_key=lock, state__in=[JobState.QUEUED, JobState.RUNNING]).exists():
        return False
    job_enqueue(kind=TELEMETRY_JOB, params={"host_id": host_id}, lock_key=lock)
    return True


def telemetry_watch(*, host_id: int) -> None:
    """An open page wants the host's probes for the next `watch_ttl_s` (renewed by the page)."""
    ttl = TelemetrySettings.load().watch_ttl_s
    TelemetryWatch.objects.update_or_create(
        host_id=host_id, defaults={"wanted_until": timezone.now() + timedelta(seconds=ttl)}
    )
    telemetry_host_ensure(host_id=host_id)


def telemetry_subscribe(*, target: str, pk: int, user: Any) -> TelemetrySnapshot | None:
    """A page opened: the recent history to draw first; and, for a user who may start and
    stop servers, a claim on the host's probes (``telemetry_keepalive``). A viewer only
    reads: the probes run while the host has an active instance (the dashboard's own,
    started with the instance) or an operator's page is open, never because a viewer looked."""
    window = selectors.telemetry_window(target=target, pk=pk)
    if window is None:
        return None
    telemetry_keepalive(host_id=window.host_id, user=user)
    return selectors.telemetry_snapshot(window=window)


def telemetry_keepalive(*, host_id: int, user: Any) -> bool:
    """Renew an open page's claim on the host's probes if ``user`` may operate servers;
    whether it did."""
    if not can_operate(user):
        return False
    telemetry_watch(host_id=host_id)
    return True


def telemetry_prune(*, host_id: int, now: float, thinned_until: float | None = None) -> float:
    """Delete rows past retention and thin older rows; returns how far thinning has got.

    Rows recorded during a sweep are kept as they are: they are that sweep's record.
    """
    conf = TelemetrySettings.load()
    own = TelemetrySample.objects.filter(host_id=host_id, sweep__isnull=True)
    own.filter(t__lt=now - conf.retention_s).delete()
    step = conf.downsample_step_s
    if step <= 0:
        return now
    cutoff = math.floor((now - conf.downsample_after_s) / step) * step
    if thinned_until is None:
        thinned_until = max(now - conf.retention_s, cutoff - RETHIN_S)
    start = math.floor(thinned_until / step) * step
    if cutoff <= start:
        return thinned_until
    seen: set[tuple[str, int | None, int]] = set()
    drop: list[int] = []
    rows = own.filter(t__gte=start, t__lt=cutoff).order_by("t")
    for pk, kind, instance_id, t in rows.values_list("pk", "kind", "instance_id", "t").iterator():
        key = (kind, instance_id, int(t // step))
        if key in seen:
            drop.append(pk)
        else:
            seen.add(key)
    for at in range(0, len(drop), _DELETE_CHUNK):
        TelemetrySample.objects.filter(pk__in=drop[at : at + _DELETE_CHUNK]).delete()
    return cutoff
