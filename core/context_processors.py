"""What every page shows: whether a healthy job worker is alive (the banner in base.html)."""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError
from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from core.jobs.health import WorkerHealth, worker_health


def _health() -> WorkerHealth | dict[str, Any]:
    try:
        return worker_health()
    except DatabaseError as exc:
        return {"ok": False, "message": f"The database cannot be read ({exc}).", "workers": ()}


def job_worker(request: HttpRequest) -> dict[str, Any]:
    """``worker_health``, read once per page and only by a page that shows it."""
    return {"worker_health": SimpleLazyObject(_health)}
