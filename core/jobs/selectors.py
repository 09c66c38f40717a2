"""Read-side queries for jobs."""

from __future__ import annotations

from core.models import Job


def job_detail(*, job_id: int) -> Job | None:
    return Job.objects.filter(pk=job_id).first()
