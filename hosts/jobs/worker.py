"""The job worker: one asyncio loop that drives many jobs at once.

Jobs here are long and mostly waiting (a server loading for minutes, a sweep whose load
generator runs in its own process), so one worker process runs many of them concurrently
as asyncio tasks. All ORM access goes through ``sync_to_async``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import traceback
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import IntegrityError, close_old_connections, connection, transaction
from django.utils import timezone

from hosts.jobs.registry import JobContext, handler_for, interrupt_hook_for, load_handlers
from hosts.models import Job, JobState

logger = logging.getLogger(__name__)


# Environment variables that tune every worker of a deployment (the embedded one in
# ``serve`` included); ``manage.py jobworker`` flags override them per process.
LEASE_ENV = "SPECDASH_JOB_LEASE_S"
HEARTBEAT_ENV = "SPECDASH_JOB_HEARTBEAT_S"
MAX_JOBS_ENV = "SPECDASH_JOB_MAX_JOBS"
POLL_ENV = "SPECDASH_JOB_POLL_S"


@dataclass(frozen=True)
class WorkerSettings:
    max_jobs: int = 32
    poll_interval: float = 0.5
    lease_seconds: float = 30.0
    heartbeat_interval: float = 5.0
    # A cancelled handler gets this long to clean up before its task is cancelled outright.
    cancel_grace: float = 60.0

    def __post_init__(self) -> None:
        if self.lease_seconds <= 0 or self.heartbeat_interval <= 0 or self.max_jobs < 1:
            raise ValueError("lease, heartbeat and max_jobs must be positive")
        # A lease must survive a missed heartbeat or two, or a busy worker loses its own jobs.
        if self.heartbeat_interval * 2 > self.lease_seconds:
            raise ValueError(
                f"heartbeat interval {self.heartbeat_interval:g}s must be at most half the "
                f"lease ({self.lease_seconds:g}s)"
            )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> WorkerSettings:
        """Defaults, then ``SPECDASH_JOB_*`` variables, then explicit (non-None) overrides.

        A lease shorter than the default brings the default heartbeat down to a third of it,
        so ``SPECDASH_JOB_LEASE_S=3`` alone is a valid setting.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name, key, kind in (
            (LEASE_ENV, "lease_seconds", float),
            (HEARTBEAT_ENV, "heartbeat_interval", float),
            (MAX_JOBS_ENV, "max_jobs", int),
            (POLL_ENV, "poll_interval", float),
        ):
            raw = env.get(name, "").strip()
            if raw:
                try:
                    values[key] = kind(raw)
                except ValueError:
                    raise ValueError(f"{name}={raw!r} is not a number") from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        lease = float(values.get("lease_seconds", cls.lease_seconds))
        values.setdefault("heartbeat_interval", min(cls.heartbeat_interval, lease / 3))
        return cls(**values)


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def claim_next_job(*, worker_id: str, lease_seconds: float) -> Job | None:
    """Claim the oldest queued job whose lock is free; None when there is none.

    The conditional UPDATE (state still 'queued') is atomic in SQLite and PostgreSQL, so
    exactly one worker wins a job. A job whose lock key is held by a running job violates
    the partial unique constraint and is skipped until that job ends.
    """
    queued = Job.objects.filter(state=JobState.QUEUED).order_by("created_at", "pk")
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
                    started_at=now,
                    heartbeat_at=now,
                    lease_expires_at=now + timedelta(seconds=lease_seconds),
                )
        except IntegrityError:
            continue
        if won:
            return Job.objects.get(pk=job.pk)
    return None


def renew_leases(*, worker_id: str, job_ids: list[int], lease_seconds: float) -> None:
    """Extend the leases of our running jobs."""
    now = timezone.now()
    Job.objects.filter(pk__in=job_ids, worker_id=worker_id, state=JobState.RUNNING).update(
        heartbeat_at=now, lease_expires_at=now + timedelta(seconds=lease_seconds)
    )


def cancel_requested_ids(*, job_ids: list[int]) -> set[int]:
    return set(
        Job.objects.filter(pk__in=job_ids, cancel_requested=True).values_list("pk", flat=True)
    )


def reap_expired_jobs() -> list[int]:
    """Mark running jobs whose worker stopped renewing its lease as interrupted."""
    now = timezone.now()
    reaped = []
    for job in Job.objects.filter(state=JobState.RUNNING, lease_expires_at__lt=now):
        updated = Job.objects.filter(
            pk=job.pk, state=JobState.RUNNING, lease_expires_at__lt=now
        ).update(
            state=JobState.INTERRUPTED,
            finished_at=now,
            error=f"worker {job.worker_id} stopped renewing its lease",
        )
        if updated:
            reaped.append(job.pk)
            hook = interrupt_hook_for(job.kind)
            if hook is not None:
                try:
                    hook(job.pk, job.params)
                except Exception:
                    logger.exception("interrupt hook for job %s failed", job.pk)
    return reaped


def finish_job(
    *, job_id: int, state: str, result: dict[str, Any] | None = None, error: str = ""
) -> None:
    Job.objects.filter(pk=job_id).update(
        state=state, result=result or {}, error=error, finished_at=timezone.now()
    )


class Worker:
    def __init__(self, worker_id: str | None = None, settings: WorkerSettings | None = None):
        self.worker_id = worker_id or default_worker_id()
        self.settings = settings or WorkerSettings.from_env()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._contexts: dict[int, JobContext] = {}
        self._cancel_deadlines: dict[int, float] = {}

    @property
    def running_job_ids(self) -> list[int]:
        return list(self._tasks)

    async def run(self, stop: asyncio.Event) -> None:
        load_handlers()
        logger.info("job worker %s started", self.worker_id)
        loop = asyncio.get_running_loop()
        next_heartbeat = 0.0
        try:
            while not stop.is_set():
                # A long-lived process must drop connections the database closed on it.
                await sync_to_async(close_old_connections)()
                await sync_to_async(reap_expired_jobs)()
                while len(self._tasks) < self.settings.max_jobs:
                    job = await sync_to_async(claim_next_job)(
                        worker_id=self.worker_id, lease_seconds=self.settings.lease_seconds
                    )
                    if job is None:
                        break
                    self._start(job)
                if self._tasks:
                    if loop.time() >= next_heartbeat:
                        await sync_to_async(renew_leases)(
                            worker_id=self.worker_id,
                            job_ids=list(self._tasks),
                            lease_seconds=self.settings.lease_seconds,
                        )
                        next_heartbeat = loop.time() + self.settings.heartbeat_interval
                    await self._signal_cancels()
                self._enforce_cancel_grace(loop.time())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.settings.poll_interval)
        finally:
            await self._shutdown()

    def _start(self, job: Job) -> None:
        ctx = JobContext(job_id=job.pk, kind=job.kind, params=job.params, worker_id=self.worker_id)
        self._contexts[job.pk] = ctx
        self._tasks[job.pk] = asyncio.create_task(self._execute(ctx), name=f"job-{job.pk}")

    async def _execute(self, ctx: JobContext) -> None:
        handler = handler_for(ctx.kind)
        try:
            if handler is None:
                raise LookupError(f"no handler for job kind {ctx.kind!r}")
            result = await handler(ctx)
            state = JobState.CANCELLED if ctx.cancelled.is_set() else JobState.SUCCEEDED
            await sync_to_async(finish_job)(job_id=ctx.job_id, state=state, result=result)
        except asyncio.CancelledError:
            await sync_to_async(finish_job)(
                job_id=ctx.job_id, state=JobState.INTERRUPTED, error="worker shut down"
            )
            hook = interrupt_hook_for(ctx.kind)
            if hook is not None:
                await sync_to_async(hook)(ctx.job_id, ctx.params)
            raise
        except Exception as exc:
            logger.exception("job %s (%s) failed", ctx.job_id, ctx.kind)
            error = f"{exc}\n{traceback.format_exc(limit=8)}"
            await sync_to_async(finish_job)(job_id=ctx.job_id, state=JobState.FAILED, error=error)
        finally:
            self._tasks.pop(ctx.job_id, None)
            self._contexts.pop(ctx.job_id, None)
            self._cancel_deadlines.pop(ctx.job_id, None)

    async def _signal_cancels(self) -> None:
        cancel_ids = await sync_to_async(cancel_requested_ids)(job_ids=list(self._tasks))
        now = asyncio.get_running_loop().time()
        for job_id in cancel_ids:
            ctx = self._contexts.get(job_id)
            if ctx is not None and not ctx.cancelled.is_set():
                ctx.cancelled.set()
                self._cancel_deadlines[job_id] = now + self.settings.cancel_grace

    def _enforce_cancel_grace(self, now: float) -> None:
        for job_id, deadline in list(self._cancel_deadlines.items()):
            task = self._tasks.get(job_id)
            if task is not None and now > deadline:
                task.cancel()

    async def _shutdown(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        logger.info("job worker %s stopped", self.worker_id)
