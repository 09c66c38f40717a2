from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.models import Job, JobState


def job_enqueue(
    *,
    kind: str,
    params: Mapping[str, object] | None = None,  # the kind's own JSON object
    lock_key: str = "",
    user: Any = None,
    tag: str = "",
    spread_key: str = "",
) -> Job:
    """Queue a job; a worker picks it up within its poll interval. ``tag``: only a worker
    started with that tag may claim it; jobs sharing a ``spread_key`` run on distinct
    machines (a second one waits rather than doubling up)."""
    created_by = user if user is not None and user.is_authenticated else None
    return Job.objects.create(
        kind=kind,
        params=params or {},
        lock_key=lock_key,
        created_by=created_by,
        tag=tag,
        spread_key=spread_key,
    )


def job_cancel(*, job: Job) -> Job:
    """Ask for a cancel: a queued job is cancelled at once, a running one at its next check."""
    with transaction.atomic():
        updated = Job.objects.filter(pk=job.pk, state=JobState.QUEUED).update(
            state=JobState.CANCELLED, cancel_requested=True, finished_at=timezone.now()
        )
        if not updated:
            Job.objects.filter(pk=job.pk).update(cancel_requested=True)
    job.refresh_from_db()
    return job
