"""The job kinds a worker can run: handlers and hooks, registered by the apps that own them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# A job's parameters: the JSON object its kind was enqueued with (``services.job_enqueue``),
# as ``Job.params`` keeps it, handed to its handler (``JobContext.params``) and its hooks.
# Each kind reads its own keys (``int(ctx.params["sweep_id"])``); a declared shape per kind
# would have core import the apps that own them, so the values stay Any.
JobParams = dict[str, Any]


class LeaseLost(BaseException):
    """This worker no longer owns the job: its lease expired (it may already be reaped and
    adopted) or a write conditional on owning it matched nothing.

    A BaseException, like ``CancelledError``, so that a handler's ``except Exception`` clean-up
    (a stop, a failure record) does not run: whatever is done after this is done by a worker
    that lost the job, beside the one that took it over."""


@dataclass
class JobContext:
    """What a handler gets: its parameters, a cancel signal it must honour, and the lease
    check it calls before anything it does against the outside world."""

    job_id: int
    kind: str
    params: JobParams
    worker_id: str
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    # time.monotonic() until which the lease is surely ours (renewal start + lease). The
    # monotonic clock keeps running while the process is stopped, so a worker that wakes up
    # after SIGSTOP or a long stall sees at once that this has passed.
    lease_deadline: float = float("inf")
    lost: str = ""  # why the job is no longer ours; empty while it is

    async def sleep_or_cancel(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True if a cancel arrived meanwhile."""
        try:
            await asyncio.wait_for(self.cancelled.wait(), timeout=seconds)
        except TimeoutError:
            return False
        return True

    def check_lease(self) -> None:
        """Raise ``LeaseLost`` unless the lease is surely still ours. Cheap (no query): call it
        before every action on a server or host."""
        if not self.lost and time.monotonic() > self.lease_deadline:
            self.lost = "its lease expired before it was renewed"
        if self.lost:
            raise LeaseLost(f"job {self.job_id}: {self.lost}")

    async def publish(self, result: JobResult) -> None:
        """Write progress into the job's ``result``, only while this worker owns it."""
        from core.jobs import store

        self.check_lease()
        if not await store.ajob_publish(
            job_id=self.job_id, worker_id=self.worker_id, result=result
        ):
            self.lost = "its row is no longer running under this worker"
            raise LeaseLost(f"job {self.job_id}: {self.lost}")

    async def append(self, entries: Sequence[tuple[str, Any]]) -> int:
        """Append ``(kind, payload)`` entries to the job's events (one row each, written once);
        the last seq written. Only while this worker owns the job."""
        from core.jobs import store

        self.check_lease()
        last = await store.ajob_append(
            job_id=self.job_id, worker_id=self.worker_id, entries=list(entries)
        )
        if last is None:
            self.lost = "its row is no longer running under this worker"
            raise LeaseLost(f"job {self.job_id}: {self.lost}")
        return last

    async def mark_ready(self) -> None:
        """Gang start: this member is claimed and prepared."""
        from core.jobs import store

        self.check_lease()
        if not await store.ajob_mark_ready(job_id=self.job_id, worker_id=self.worker_id):
            self.lost = "its row is no longer running under this worker"
            raise LeaseLost(f"job {self.job_id}: {self.lost}")

    async def wait_for_start(self, poll: float = 0.05) -> float | None:
        """Gang start: the common wall-clock start its gang was given; None on a cancel."""
        from core.jobs import store

        while not self.cancelled.is_set():
            self.check_lease()
            start_at = await store.ajob_start_at(job_id=self.job_id)
            if start_at is not None:
                return start_at
            if await self.sleep_or_cancel(poll):
                break
        return None


# A job's result as its handler returns (or publishes) it: each kind's own JSON object (a
# TypedDict or a plain dict), stored in ``Job.result`` as it is. Read-only here: the queue only
# stores it, so a Mapping lets every kind declare its own shape.
JobResult = Mapping[str, object]
Handler = Callable[[JobContext], Awaitable[JobResult | None]]
# Sync hooks, run in one transaction with the clearing of the job's owed follow-up: they may
# run again after a crash before their commit, so what they do must be idempotent.
InterruptHook = Callable[[int, JobParams], None]

_handlers: dict[str, Handler] = {}
_interrupt_hooks: dict[str, list[InterruptHook]] = {}
_forced_cancel_hooks: dict[str, list[InterruptHook]] = {}


@dataclass(frozen=True)
class PeriodicTask:
    """Housekeeping a worker runs every ``interval_s()`` seconds (0: never), in a thread of its
    own so that neither the loop nor the lease renewals ever wait on it. ``interval_s`` is a
    function: settings are read when the task is due, not when it registers."""

    name: str
    run: Callable[[], object]
    interval_s: Callable[[], float]


_periodic: dict[str, PeriodicTask] = {}


def periodic_task(
    name: str, *, interval_s: Callable[[], float]
) -> Callable[[Callable[[], object]], Callable[[], object]]:
    def register(func: Callable[[], object]) -> Callable[[], object]:
        _periodic[name] = PeriodicTask(name=name, run=func, interval_s=interval_s)
        return func

    return register


def periodic_tasks() -> list[PeriodicTask]:
    return list(_periodic.values())


def job_handler(kind: str) -> Callable[[Handler], Handler]:
    def register(func: Handler) -> Handler:
        _handlers[kind] = func
        return func

    return register


def _add(table: dict[str, list[InterruptHook]], kind: str, func: InterruptHook) -> None:
    hooks = table.setdefault(kind, [])
    if func not in hooks:
        hooks.append(func)


def on_interrupted(kind: str) -> Callable[[InterruptHook], InterruptHook]:
    """Register a sync hook run when a job of this kind is found with an expired lease or its
    worker shut down, so the domain objects it drove (a sweep, an instance) show the truth.
    Several hooks may be registered for one kind; they run in registration order."""

    def register(func: InterruptHook) -> InterruptHook:
        _add(_interrupt_hooks, kind, func)
        return func

    return register


def on_cancel_forced(kind: str) -> Callable[[InterruptHook], InterruptHook]:
    """Register the clean-up a job of this kind needs when a cancel ran past its grace and its
    task was cancelled outright (for ``server.run``: a verified stop). A kind without one gets
    its interrupt hooks, so what it drove at least stops showing as running."""

    def register(func: InterruptHook) -> InterruptHook:
        _add(_forced_cancel_hooks, kind, func)
        return func

    return register


def handler_for(kind: str) -> Handler | None:
    return _handlers.get(kind)


def _combined(hooks: list[InterruptHook]) -> InterruptHook | None:
    if not hooks:
        return None
    if len(hooks) == 1:
        return hooks[0]

    def run_all(job_id: int, params: JobParams) -> None:
        for hook in hooks:
            hook(job_id, params)

    return run_all


def interrupt_hook_for(kind: str) -> InterruptHook | None:
    return _combined(_interrupt_hooks.get(kind, []))


def forced_cancel_hook_for(kind: str) -> InterruptHook | None:
    return _combined(_forced_cancel_hooks.get(kind) or _interrupt_hooks.get(kind, []))


def load_handlers() -> None:
    """Make sure the handlers are registered before jobs are claimed.

    Each app registers its own handlers and hooks in its ``AppConfig.ready()``, so this
    registry knows none of them (and imports no app): it only checks that Django has loaded
    the apps, which runs those ``ready()`` methods."""
    from django.apps import apps

    apps.check_apps_ready()
