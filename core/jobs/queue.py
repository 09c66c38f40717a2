"""The job queue's own writes, each one short synchronous transaction (a worker calls them
through ``sync_to_async``): claiming a job, renewing leases, reaping the jobs of workers
that went silent, running the follow-ups (hooks) they owe, and finishing a job."""

from __future__ import annotations

import logging
import socket
import time
from datetime import timedelta

from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from core.jobs.fence import job_finish, job_renew
from core.jobs.registry import JobResult, forced_cancel_hook_for, interrupt_hook_for
from core.models import Job, JobHook, JobState

logger = logging.getLogger(__name__)


def default_machine() -> str:
    return socket.gethostname()


def claim_next_job(
    *,
    worker_id: str,
    lease_seconds: float,
    kinds: tuple[str, ...] = (),
    tags: tuple[str, ...] = (),
    machine: str = "",
) -> Job | None:
    """Claim the oldest queued job whose lock is free and whose placement this worker meets;
    None when there is none.

    The conditional UPDATE (state still 'queued') is atomic in SQLite and PostgreSQL, so
    exactly one worker wins a job. A job whose lock key is held by a running job, or whose
    spread key already runs on this machine, violates a partial unique constraint and is
    skipped until that job ends.
    """
    queued = Job.objects.filter(state=JobState.QUEUED).order_by("created_at", "pk")
    if kinds:
        queued = queued.filter(kind__in=kinds)
    queued = queued.filter(Q(tag="") | Q(tag__in=tags)) if tags else queued.filter(tag="")
    if connection.features.has_select_for_update_skip_locked:
        with transaction.atomic():
            candidates = list(queued.select_for_update(skip_locked=True)[:20])
    else:
        candidates = list(queued[:20])
    now = timezone.now()
    for job in candidates:
        try:
            with transaction.atomic():
                won = Job.objects.filter(pk=job.pk, state=JobState.QUEUED).update(
                    state=JobState.RUNNING,
                    worker_id=worker_id,
                    machine=machine or default_machine(),
                    started_at=now,
                    heartbeat_at=now,
                    lease_expires_at=now + timedelta(seconds=lease_seconds),
                )
        except IntegrityError:
            continue
        if won:
            return Job.objects.get(pk=job.pk)
    return None


def renew_leases(*, worker_id: str, job_ids: list[int], lease_seconds: float) -> list[int]:
    """Extend the leases of our running jobs; the ids whose renewal matched no row (reaped,
    so no longer ours)."""
    return [
        job_id
        for job_id in job_ids
        if not job_renew(job_id=job_id, worker_id=worker_id, lease_seconds=lease_seconds)
    ]


def cancel_requested_ids(*, job_ids: list[int]) -> set[int]:
    return set(
        Job.objects.filter(pk__in=job_ids, cancel_requested=True).values_list("pk", flat=True)
    )


# Owed hooks that failed wait this long (doubling up to the cap) before the next attempt.
HOOK_RETRY_S = 1.0
HOOK_RETRY_MAX_S = 60.0
_hook_retry: dict[int, tuple[float, float]] = {}  # job id -> (next attempt, current wait)


def reap_expired_jobs() -> list[int]:
    """Mark running jobs whose worker stopped renewing its lease as interrupted, then run
    every owed follow-up (these reaps', and any a reaper that died left behind)."""
    now = timezone.now()
    reaped = []
    for job in Job.objects.filter(state=JobState.RUNNING, lease_expires_at__lt=now):
        # The reap and the debt of its hook in one UPDATE: nothing can fall between them.
        updated = Job.objects.filter(
            pk=job.pk, state=JobState.RUNNING, lease_expires_at__lt=now
        ).update(
            state=JobState.INTERRUPTED,
            finished_at=now,
            error=f"worker {job.worker_id} stopped renewing its lease",
            hook_owed=JobHook.INTERRUPTED,
        )
        if updated:
            reaped.append(job.pk)
    run_owed_hooks()
    return reaped


def run_owed_hooks() -> list[int]:
    """Run every owed follow-up not waiting for a retry; the ids done."""
    loop_now = time.monotonic()
    done = []
    for job_id in Job.objects.exclude(hook_owed="").values_list("pk", flat=True):
        next_try, _ = _hook_retry.get(job_id, (0.0, 0.0))
        if loop_now >= next_try and run_owed_hook(job_id):
            done.append(job_id)
    return done


def run_owed_hook(job_id: int) -> bool:
    """Run a job's owed hook in one transaction with the clearing of the debt: either both
    commit, or (a crash, an exception) neither does and the hook stays owed. True if done."""
    try:
        with transaction.atomic():
            job = Job.objects.filter(pk=job_id).exclude(hook_owed="").first()
            if job is None:
                return False
            # Conditional, first: the write lock (SQLite) or row lock (PostgreSQL) that makes
            # a second worker attempting the same debt wait, then find it paid.
            if not Job.objects.filter(pk=job_id, hook_owed=job.hook_owed).update(hook_owed=""):
                return False
            if job.hook_owed == JobHook.CANCEL_FORCED:
                hook = forced_cancel_hook_for(job.kind)
            else:
                hook = interrupt_hook_for(job.kind)
            if hook is not None:
                hook(job.pk, job.params)
    except Exception:
        _, wait = _hook_retry.get(job_id, (0.0, HOOK_RETRY_S / 2))
        wait = min(HOOK_RETRY_MAX_S, wait * 2)
        _hook_retry[job_id] = (time.monotonic() + wait, wait)
        logger.exception("owed hook of job %s failed; retried in %.0f s", job_id, wait)
        return False
    _hook_retry.pop(job_id, None)
    return True


def finish_job(
    *,
    job_id: int,
    state: str,
    result: JobResult | None = None,
    error: str = "",
    worker_id: str | None = None,
) -> bool:
    """The final state. With ``worker_id`` (what workers use), fenced: False and nothing
    written when the job is no longer running under that worker."""
    if worker_id is not None:
        return job_finish(
            job_id=job_id, worker_id=worker_id, state=state, result=result, error=error
        )
    return bool(
        Job.objects.filter(pk=job_id).update(
            state=state, result=result or {}, error=error, finished_at=timezone.now()
        )
    )
