"""Jobs: what a 202 points at. Poll until ``finished`` is true."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from django.db.models import Q, QuerySet
from django.http import HttpRequest
from ninja import Field, Query, Router

from core.jobs import selectors as job_selectors
from core.jobs.health import worker_health
from core.models import Job, JobState
from specdash.api.auth import requires, viewer
from specdash.api.common import JobId, ListFilters, found, paged, responses
from specdash.api.schemas.jobs import HealthOut, JobOut, JobPage

if TYPE_CHECKING:
    from datetime import datetime

router = Router(tags=["jobs"])


class WorkerBody(TypedDict):
    worker_id: str
    healthy: bool
    error: str
    beat_at: datetime
    kinds: list[str]


class HealthBody(TypedDict):
    """What ``HealthOut`` renders."""

    ok: bool
    message: str
    stale_after_s: float
    workers: list[WorkerBody]


class JobFilters(ListFilters):
    kind: str | None = Field(None, max_length=64, description="e.g. server.run, sweep.run")
    state: JobState | None = None

    def filter_kind(self, kind: str | None) -> Q:
        return Q(kind=kind) if kind else Q()


@router.get("/jobs", response=responses({200: JobPage}), summary="List jobs")
@requires(viewer)
@paged
def job_list(request: HttpRequest, filters: Query[JobFilters]) -> QuerySet[Job]:
    return filters.filter(job_selectors.job_filter())


@router.get("/jobs/{job_id}", response=responses({200: JobOut}), summary="One job")
@requires(viewer)
def job_detail(request: HttpRequest, job_id: JobId) -> Job:
    return found(job_selectors.job_detail(job_id=job_id), f"No job #{job_id}.")


@router.get("/health", response=responses({200: HealthOut}), summary="Job worker health")
@requires(viewer)
def health(request: HttpRequest) -> HealthBody:
    """Whether a healthy job worker is alive (new work is refused with 503 while none is)."""
    found = worker_health()
    return {
        "ok": found.ok,
        "message": found.message,
        "stale_after_s": found.stale_after_s,
        "workers": [
            {
                "worker_id": w.worker_id,
                "healthy": w.healthy,
                "error": w.error,
                "beat_at": w.beat_at,
                "kinds": list(w.kinds),
            }
            for w in found.workers
        ],
    }
