"""Whether a healthy job worker is alive, from the rows the workers beat (``WorkerBeat``).

Each worker writes its row at every heartbeat of its loop and after each failed iteration
(when it still can). A row counts as alive while its last beat is younger than a lease: a
worker silent for that long has lost its jobs to the reaper anyway, and one whose database
refuses its writes goes silent in the same way, so the rule holds with any number of workers
on SQLite or PostgreSQL. New work is refused (``WorkerUnavailable``) while no alive, healthy
worker claims its kind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.models import WorkerBeat


class WorkerUnavailable(ValidationError):
    """No healthy job worker is alive to carry out the new work. A ValidationError, so every
    form and view that shows a service's refusal shows this one too; the API answers 503."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="worker_unavailable")


@dataclass(frozen=True)
class WorkerStatus:
    worker_id: str
    healthy: bool
    error: str
    beat_at: datetime
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class WorkerHealth:
    """The workers alive now (beaten within ``stale_after_s``), healthy or not."""

    workers: tuple[WorkerStatus, ...] = field(default_factory=tuple)
    stale_after_s: float = 30.0

    @property
    def healthy(self) -> tuple[WorkerStatus, ...]:
        return tuple(w for w in self.workers if w.healthy)

    @property
    def ok(self) -> bool:
        return bool(self.healthy)

    def serves(self, kind: str) -> bool:
        return any(not w.kinds or kind in w.kinds for w in self.healthy)

    @property
    def message(self) -> str:
        if self.ok:
            return f"{len(self.healthy)} healthy job worker(s) alive."
        failing = [w for w in self.workers if not w.healthy]
        if failing:
            return (
                f"The job worker is unhealthy: {failing[0].error or 'its loop fails'}. "
                "New servers, sweeps and experiments are refused until it recovers."
            )
        return (
            f"No job worker has reported in the last {self.stale_after_s:g} s. New servers, "
            "sweeps and experiments are refused until one runs (manage.py serve runs one; "
            "see docs/operations.md)."
        )


def _stale_after() -> float:
    return float(settings.SPECDASH_JOB_LEASE_S)


def worker_health() -> WorkerHealth:
    """The workers whose last beat is younger than a lease."""
    stale_after = _stale_after()
    since = timezone.now() - timedelta(seconds=stale_after)
    rows = WorkerBeat.objects.filter(beat_at__gte=since).order_by("worker_id")
    return WorkerHealth(
        workers=tuple(
            WorkerStatus(
                worker_id=row.worker_id,
                healthy=row.healthy,
                error=row.error,
                beat_at=row.beat_at,
                kinds=tuple(row.kinds or ()),
            )
            for row in rows
        ),
        stale_after_s=stale_after,
    )


def worker_require(*, kind: str) -> None:
    """Raise ``WorkerUnavailable`` unless an alive, healthy worker claims jobs of ``kind``
    (the check every service that queues new work makes before it writes anything)."""
    if not settings.SPECDASH_WORKER_REQUIRED:
        return
    health = worker_health()
    if not health.ok:
        raise WorkerUnavailable(health.message)
    if not health.serves(kind):
        raise WorkerUnavailable(
            f"No healthy job worker claims {kind} jobs. It is refused until one runs "
            "(see docs/operations.md)."
        )


def worker_beat(
    *,
    worker_id: str,
    machine: str = "",
    kinds: tuple[str, ...] = (),
    healthy: bool = True,
    error: str = "",
    started_at: datetime | None = None,
) -> None:
    """Record a worker's beat, committed at once (it is also the worker's write check)."""
    now = timezone.now()
    with transaction.atomic():
        beat = {
            "machine": machine,
            "pid": os.getpid(),
            "kinds": list(kinds),
            "healthy": healthy,
            "error": error[:2000],
            "beat_at": now,
        }
        WorkerBeat.objects.update_or_create(
            worker_id=worker_id,
            defaults=beat,
            create_defaults={**beat, "started_at": started_at or now},
        )


def worker_gone(*, worker_id: str) -> None:
    """A worker that shuts down cleanly says so: it stops counting at once."""
    WorkerBeat.objects.filter(worker_id=worker_id).delete()
