"""Writes a job makes about itself, fenced: each is conditional on the row still running
under the worker that makes it, and reports loss (False) instead of overwriting what the
worker that reaped or took over the job wrote."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from core.jobs.registry import JobResult
from core.models import Job, JobEvent, JobState


def _ours(job_id: int, worker_id: str) -> Any:
    return Job.objects.filter(pk=job_id, worker_id=worker_id, state=JobState.RUNNING)


def job_publish(*, job_id: int, worker_id: str, result: JobResult) -> bool:
    """Progress into the job's result (replacing it); False if the job is no longer ours.
    What grows as the job runs goes to ``job_append`` instead."""
    return bool(_ours(job_id, worker_id).update(result=result, heartbeat_at=timezone.now()))


def job_append(*, job_id: int, worker_id: str, entries: Sequence[tuple[str, Any]]) -> int | None:
    """Append ``(kind, payload)`` entries to the job's events, each as its own row numbered
    after the last; the last number written, or None (nothing written) if the job is no
    longer ours. Nothing already written is rewritten: the cost is that of the new rows."""
    with transaction.atomic():
        # The fence, and the row lock that orders two appends to one job.
        if not _ours(job_id, worker_id).update(heartbeat_at=timezone.now()):
            return None
        last = JobEvent.objects.filter(job_id=job_id).aggregate(last=Max("seq"))["last"] or 0
        JobEvent.objects.bulk_create(
            JobEvent(job_id=job_id, seq=last + i, kind=kind, payload=payload)
            for i, (kind, payload) in enumerate(entries, start=1)
        )
        return int(last + len(entries))


def job_events_after(*, job_id: int, after: int, limit: int = 1000) -> list[JobEvent]:
    """The job's events numbered above ``after``, in order, at most ``limit`` of them."""
    return list(JobEvent.objects.filter(job_id=job_id, seq__gt=after).order_by("seq")[:limit])


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
    result: JobResult | None = None,
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
