"""What every page shows: whether a healthy job worker is alive (the banner in base.html)."""

from __future__ import annotations

from typing import TypedDict

from django.db import DatabaseError
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from core.jobs.health import WorkerHealth, worker_health


class _HealthUnread(TypedDict):
    """What the banner reads when the workers' beats cannot be read (WorkerHealth's names)."""

    ok: bool
    message: str
    workers: tuple[()]


class WorkerContext(TypedDict):
    worker_health: SimpleLazyObject  # WorkerHealth or _HealthUnread, read on first use


def _health() -> WorkerHealth | _HealthUnread:
    try:
        return worker_health()
    except DatabaseError as exc:
        return {"ok": False, "message": f"The database cannot be read ({exc}).", "workers": ()}


def job_worker(request: HttpRequest) -> WorkerContext:
    """``worker_health``, read once per page and only by a page that shows it."""
    return {"worker_health": SimpleLazyObject(_health)}
