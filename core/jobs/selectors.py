"""Read-side queries for jobs."""

from __future__ import annotations

from django.db.models import QuerySet

from core.models import Job


def job_detail(*, job_id: int) -> Job | None:
    return Job.objects.filter(pk=job_id).first()


def job_filter() -> QuerySet[Job]:
    """Jobs, newest first, for the API's list (its FilterSchema narrows them)."""
    return Job.objects.order_by("-created_at", "-pk")


def job_newest(*, lock_key: str) -> Job | None:
    """The newest job holding ``lock_key`` (e.g. the one driving an instance)."""
    return Job.objects.filter(lock_key=lock_key).order_by("-created_at", "-pk").first()
