"""The job worker: one asyncio loop that drives many jobs at once.

Jobs here are long and mostly waiting (a server loading for minutes, a sweep whose load
generator runs in its own process), so one worker process runs many of them concurrently
as asyncio tasks. All ORM access goes through the queue's async face (``core.jobs.store``):
the jobs' on the one shared thread, the loop's own (claim, reap, beat, leases, cancels) on a
thread of its own, so that a job whose writes wait out a locked database never holds up the
beat that says so. What happens inside each job's task, up to its one fenced end, is in
``core.jobs.execution``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ParamSpec, TypeVar

from django.db import close_old_connections, connections
from django.utils import timezone

from core.jobs import store
from core.jobs.execution import JobRuns
from core.jobs.health import worker_beat, worker_gone
from core.jobs.queue import (
    cancel_requested_ids,
    claim_next_job,
    default_machine,
    reap_expired_jobs,
    renew_leases,
)
from core.jobs.registry import (
    JobContext,
    PeriodicTask,
    load_handlers,
    periodic_tasks,
)
from core.models import Job

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True)
class WorkerSettings:
    max_jobs: int = 32
    poll_interval: float = 0.5
    lease_seconds: float = 30.0
    heartbeat_interval: float = 5.0
    # A cancelled handler gets this long to clean up before its task is cancelled outright.
    cancel_grace: float = 60.0
    kinds: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    machine: str = ""
    # A failed iteration is retried after retry_interval, doubling up to retry_max_interval.
    retry_interval: float = 0.5
    retry_max_interval: float = 15.0

    def __post_init__(self) -> None:
        if self.lease_seconds <= 0 or self.heartbeat_interval <= 0 or self.max_jobs < 1:
            raise ValueError("lease, heartbeat and max_jobs must be positive")
        if not 0 < self.retry_interval <= self.retry_max_interval:
            raise ValueError("the retry interval must be positive and at most its maximum")
        # A lease must survive a missed heartbeat or two, or a busy worker loses its own jobs.
        if self.heartbeat_interval * 2 > self.lease_seconds:
            raise ValueError(
                f"heartbeat interval {self.heartbeat_interval:g}s must be at most half the "
                f"lease ({self.lease_seconds:g}s)"
            )

    @classmethod
    def from_settings(
        cls,
        *,
        max_jobs: int | None = None,
        poll_interval: float | None = None,
        lease_seconds: float | None = None,
        heartbeat_interval: float | None = None,
        kinds: str | None = None,
        tags: str | None = None,
        machine: str | None = None,
    ) -> WorkerSettings:
        """The ``SPECDASH_JOB_*`` settings (specdash/settings.py), then the explicit (non-None)
        overrides: ``manage.py jobworker``'s flags (kinds and tags comma-separated).

        Without a heartbeat setting, a lease shorter than the default brings the heartbeat
        down to a third of it, so ``SPECDASH_JOB_LEASE_S=3`` alone is a valid setting.
        """
        from django.conf import settings

        lease = _given(lease_seconds, float(settings.SPECDASH_JOB_LEASE_S))
        if settings.SPECDASH_JOB_HEARTBEAT_S is not None:
            heartbeat = float(settings.SPECDASH_JOB_HEARTBEAT_S)
        else:
            heartbeat = min(cls.heartbeat_interval, float(lease) / 3)
        return cls(
            lease_seconds=lease,
            max_jobs=_given(max_jobs, int(settings.SPECDASH_JOB_MAX_JOBS)),
            poll_interval=_given(poll_interval, float(settings.SPECDASH_JOB_POLL_S)),
            heartbeat_interval=_given(heartbeat_interval, heartbeat),
            kinds=_names(settings.SPECDASH_JOB_KINDS if kinds is None else kinds.split(",")),
            tags=_names(settings.SPECDASH_JOB_TAGS if tags is None else tags.split(",")),
            machine=_given(machine, str(settings.SPECDASH_JOB_MACHINE).strip()),
            retry_interval=float(settings.SPECDASH_JOB_RETRY_S),
            retry_max_interval=float(settings.SPECDASH_JOB_RETRY_MAX_S),
        )


@dataclass(frozen=True)
class WorkerHealthState:
    """What a worker knows of its own health: unhealthy from its first failed iteration
    until one succeeds again (``since``: when that state began, wall clock)."""

    healthy: bool
    error: str
    since: float


# A worker's periodic housekeeping (retention) first runs this long after it starts: never in
# the middle of a start-up, and not at all in a worker that lives a few seconds (tests).
PERIODIC_FIRST_DELAY_S = 60.0


def _run_periodic(task: PeriodicTask) -> None:
    try:
        task.run()
    except Exception:
        logger.exception("periodic task %s failed; it runs again at its next interval", task.name)
    finally:
        connections.close_all()  # this thread's connections, not the loop's


def _given(value: T | None, default: T) -> T:
    return default if value is None else value


def _names(parts: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({part.strip() for part in parts if part.strip()}))


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class Worker:
    def __init__(self, worker_id: str | None = None, settings: WorkerSettings | None = None):
        self.worker_id = worker_id or default_worker_id()
        self.settings = settings or WorkerSettings.from_settings()
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._contexts: dict[int, JobContext] = {}
        self._cancel_deadlines: dict[int, float] = {}
        # How each job ends, and which ends are being written (execution.py).
        self._runs = JobRuns(self.worker_id)
        self._next_heartbeat = 0.0
        self._failures = 0
        self.started_at = timezone.now()
        self.health = WorkerHealthState(healthy=True, error="", since=time.time())
        self._loop_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="job-loop")
        self._periodic_due: dict[str, float] = {}
        self._periodic_running: dict[str, asyncio.Future[None]] = {}

    @property
    def running_job_ids(self) -> list[int]:
        return list(self._tasks)

    async def run(self, stop: asyncio.Event) -> None:
        load_handlers()
        logger.info(
            "job worker %s started (machine %s, kinds %s, tags %s)",
            self.worker_id,
            self.settings.machine or default_machine(),
            ",".join(self.settings.kinds) or "all",
            ",".join(self.settings.tags) or "none",
        )
        loop = asyncio.get_running_loop()
        try:
            while not stop.is_set():
                # First, before any query: a loop that stalled past a lease (or whose database
                # failed it) must not act on jobs another worker may have taken over meanwhile.
                self._fence_expired()
                try:
                    await self._iterate(loop)
                except Exception as exc:
                    # One failed iteration (the database full, locked, read-only or gone) must
                    # not end the worker: it says so, waits, and tries again.
                    delay = await self._failed(exc)
                else:
                    self._recovered()
                    delay = self.settings.poll_interval
                self._enforce_cancel_grace(loop.time())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
        finally:
            await self._shutdown()

    async def _iterate(self, loop: asyncio.AbstractEventLoop) -> None:
        # A long-lived process must drop connections the database closed on it.
        await self._db(close_old_connections)()
        await self._db(reap_expired_jobs)()
        while len(self._tasks) < self.settings.max_jobs:
            claimed_at = time.monotonic()
            job = await self._db(claim_next_job)(
                worker_id=self.worker_id,
                lease_seconds=self.settings.lease_seconds,
                kinds=self.settings.kinds,
                tags=self.settings.tags,
                machine=self.settings.machine,
            )
            if job is None:
                break
            self._start(job, lease_deadline=claimed_at + self.settings.lease_seconds)
        if loop.time() >= self._next_heartbeat or not self.health.healthy:
            # The beat is a committed write every heartbeat, busy or idle: a database that
            # stopped taking writes is found within one heartbeat even with no job running.
            await self._beat(healthy=True, error="")
            if self._tasks:
                await self._heartbeat()
            self._next_heartbeat = loop.time() + self.settings.heartbeat_interval
        if self._tasks:
            await self._signal_cancels()
        self._start_due_periodic(loop.time())

    def _start_due_periodic(self, now: float) -> None:
        """Start each registered periodic task that is due and not still running, each in a
        thread of its own. The first run waits PERIODIC_FIRST_DELAY_S after the worker starts."""
        for task in periodic_tasks():
            interval = task.interval_s()
            if interval <= 0 or task.name in self._periodic_running:
                continue
            due = self._periodic_due.setdefault(task.name, now + PERIODIC_FIRST_DELAY_S)
            if now < due:
                continue
            self._periodic_due[task.name] = now + interval
            future = asyncio.ensure_future(asyncio.to_thread(_run_periodic, task))
            self._periodic_running[task.name] = future
            future.add_done_callback(functools.partial(self._periodic_done, task.name))

    def _periodic_done(self, name: str, _future: asyncio.Future[None]) -> None:
        self._periodic_running.pop(name, None)

    async def _failed(self, exc: Exception) -> float:
        """Mark the worker unhealthy (in memory, and in the database when it still takes the
        write) and return how long to wait before the next try: doubling up to the maximum."""
        self._failures += 1
        error = f"{type(exc).__name__}: {exc}".strip()
        if self.health.healthy or error != self.health.error:
            logger.exception(
                "job worker %s: its loop failed (%s); retrying with back-off", self.worker_id, error
            )
        else:
            logger.warning("job worker %s: still failing: %s", self.worker_id, error)
        if self.health.healthy:
            self.health = WorkerHealthState(healthy=False, error=error, since=time.time())
        else:
            self.health = WorkerHealthState(healthy=False, error=error, since=self.health.since)
        with contextlib.suppress(Exception):
            await self._db(close_old_connections)()
        with contextlib.suppress(Exception):
            await self._beat(healthy=False, error=error)
        return float(
            min(
                self.settings.retry_max_interval,
                self.settings.retry_interval * 2 ** (self._failures - 1),
            )
        )

    def _recovered(self) -> None:
        if not self.health.healthy:
            logger.warning(
                "job worker %s recovered after %.1f s (%d failed iterations; last: %s)",
                self.worker_id,
                time.time() - self.health.since,
                self._failures,
                self.health.error,
            )
            self.health = WorkerHealthState(healthy=True, error="", since=time.time())
        self._loop_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="job-loop")
        self._failures = 0

    def _db(self, fn: Callable[P, R]) -> Callable[P, Awaitable[R]]:
        """``fn`` run on the loop's own thread (its own database connection)."""
        return store.on_thread(fn, self._loop_thread)

    def record_beat(self, *, healthy: bool = True, error: str = "") -> None:
        """This worker's beat, written and committed now (also its start-up write check)."""
        worker_beat(
            worker_id=self.worker_id,
            machine=self.settings.machine or default_machine(),
            kinds=self.settings.kinds,
            healthy=healthy,
            error=error,
            started_at=self.started_at,
        )

    async def _beat(self, *, healthy: bool, error: str) -> None:
        await self._db(self.record_beat)(healthy=healthy, error=error)

    def _start(self, job: Job, *, lease_deadline: float) -> None:
        ctx = JobContext(
            job_id=job.pk,
            kind=job.kind,
            params=job.params,
            worker_id=self.worker_id,
            lease_deadline=lease_deadline,
        )
        self._contexts[job.pk] = ctx
        self._tasks[job.pk] = asyncio.create_task(self._execute(ctx), name=f"job-{job.pk}")

    async def _heartbeat(self) -> None:
        started = time.monotonic()
        ids = list(self._tasks)
        lost = await self._db(renew_leases)(
            worker_id=self.worker_id, job_ids=ids, lease_seconds=self.settings.lease_seconds
        )
        for job_id in ids:
            ctx = self._contexts.get(job_id)
            if ctx is not None and job_id not in lost and not ctx.lost:
                ctx.lease_deadline = started + self.settings.lease_seconds
        for job_id in lost:
            if job_id in self._runs.ending:
                continue
            self._lose(job_id, "its lease renewal matched no row (reaped by another worker)")

    def _fence_expired(self) -> None:
        now = time.monotonic()
        for job_id, ctx in list(self._contexts.items()):
            if now > ctx.lease_deadline and job_id not in self._runs.ending:
                self._lose(job_id, "its lease expired before it was renewed")

    def _lose(self, job_id: int, why: str) -> None:
        """Stop driving a job this worker no longer owns, at once and without a word to
        the database or the server: the reaper and the adopting job own what comes next."""
        ctx = self._contexts.get(job_id)
        task = self._tasks.get(job_id)
        if ctx is None or task is None:
            return
        if not ctx.lost:
            ctx.lost = why
            logger.warning("job %s lost by worker %s: %s; stopping it", job_id, self.worker_id, why)
        task.cancel()

    async def _execute(self, ctx: JobContext) -> None:
        try:
            await self._runs.drive(
                ctx, ended=functools.partial(self._contexts.pop, ctx.job_id, None)
            )
        finally:
            self._tasks.pop(ctx.job_id, None)
            self._contexts.pop(ctx.job_id, None)
            self._cancel_deadlines.pop(ctx.job_id, None)
            self._runs.forced.discard(ctx.job_id)

    async def _signal_cancels(self) -> None:
        cancel_ids = await self._db(cancel_requested_ids)(job_ids=list(self._tasks))
        now = asyncio.get_running_loop().time()
        for job_id in cancel_ids:
            ctx = self._contexts.get(job_id)
            if ctx is not None and not ctx.cancelled.is_set():
                ctx.cancelled.set()
                self._cancel_deadlines[job_id] = now + self.settings.cancel_grace

    def _enforce_cancel_grace(self, now: float) -> None:
        for job_id, deadline in list(self._cancel_deadlines.items()):
            task = self._tasks.get(job_id)
            if task is not None and now > deadline and job_id not in self._runs.forced:
                logger.warning(
                    "job %s did not stop within the %g s cancel grace; forcing it",
                    job_id,
                    self.settings.cancel_grace,
                )
                self._runs.forced.add(job_id)
                task.cancel()

    async def _shutdown(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await self._db(worker_gone)(worker_id=self.worker_id)
        except Exception as exc:  # its row goes stale within a lease instead
            logger.warning("job worker %s could not remove its beat: %s", self.worker_id, exc)
        with contextlib.suppress(Exception):
            await self._db(connections.close_all)()
        self._loop_thread.shutdown(wait=False)
        logger.info("job worker %s stopped", self.worker_id)
