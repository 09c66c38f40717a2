"""Writes a job makes about itself, fenced: each is conditional on the row still running
under the worker that makes it, and reports loss (False) instead of overwriting what the
worker that reaped or took over the job wrote."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from hosts.models import Job, JobState


def _ours(job_id: int, worker_id: str) -> Any:
    return Job.objects.filter(pk=job_id, worker_id=worker_id, state=JobState.RUNNING)


def job_publish(*, job_id: int, worker_id: str, result: dict[str, Any]) -> bool:
    """Progress into the job's result (a shard's events); False if the job is no longer ours."""
    return bool(_ours(job_id, worker_id).update(result=result, heartbeat_at=timezone.now()))


def job_mark_ready(*, job_id: int, worker_id: str) -> bool:
    return bool(_ours(job_id, worker_id).update(ready_at=timezone.now()))


def job_start_at(*, job_id: int) -> float | None:
    value = Job.objects.filter(pk=job_id).values_list("start_at", flat=True).first()
    return float(value) if value is not None else None


def job_finish(
    *,
    job_id: int,
    worker_id: str,
    state: str,
    result: dict[str, Any] | None = None,
    error: str = "",
    hook_owed: str = "",
) -> bool:
    """The final state, written only by the worker that still owns the job; False (and
    nothing written) when it was reaped meanwhile."""
    return bool(
        _ours(job_id, worker_id).update(
            state=state,
            result=result or {},
            error=error,
            finished_at=timezone.now(),
            hook_owed=hook_owed,
        )
    )


def job_renew(*, job_id: int, worker_id: str, lease_seconds: float) -> bool:
    now = timezone.now()
    return bool(
        _ours(job_id, worker_id).update(
            heartbeat_at=now, lease_expires_at=now + timedelta(seconds=lease_seconds)
        )
    )


def gang_members(job_ids: list[int]) -> list[Job]:
    return list(Job.objects.filter(pk__in=job_ids).order_by("pk"))


def gang_start(*, job_ids: list[int], start_at: float) -> bool:
    """Give every member of a gang its common start, all or none: False (nothing written)
    when one of them is no longer running."""
    with transaction.atomic():
        updated = Job.objects.filter(
            pk__in=job_ids, state=JobState.RUNNING, ready_at__isnull=False
        ).update(start_at=start_at)
        if updated != len(job_ids):
            transaction.set_rollback(True)
            return False
    return True
