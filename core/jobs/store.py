"""The job queue's async face: an ``async`` twin of each queue service the worker, a job's
context and the jobs that drive other jobs (a split sweep's remote shards) await, in the
manner of contrib.sessions' ``load`` / ``aload``.

This module is the one place in ``core.jobs`` that wraps synchronous code with
``sync_to_async``; each twin is its service wrapped once, so its signature is the service's
own. The twins run on the shared thread (``thread_sensitive``), where every job's database work
goes; ``on_thread`` is for the worker loop's own bookkeeping, which runs on a thread (and
database connection) of its own so that a job whose writes wait out a locked database never
holds up the beat that says so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async

from core.jobs import fence, queue, services
from core.models import Job

P = ParamSpec("P")
R = TypeVar("R")


def on_thread(fn: Callable[P, R], executor: ThreadPoolExecutor) -> Callable[P, Awaitable[R]]:
    """``fn`` run on ``executor``'s thread (its own database connection), not the shared one."""
    return sync_to_async(fn, thread_sensitive=False, executor=executor)


ajob_enqueue = sync_to_async(services.job_enqueue)
ajob_cancel = sync_to_async(services.job_cancel)
ajob_publish = sync_to_async(fence.job_publish)
ajob_append = sync_to_async(fence.job_append)
ajob_events_after = sync_to_async(fence.job_events_after)
ajob_mark_ready = sync_to_async(fence.job_mark_ready)
ajob_start_at = sync_to_async(fence.job_start_at)
ajob_finish = sync_to_async(fence.job_finish)
agang_members = sync_to_async(fence.gang_members)
agang_start = sync_to_async(fence.gang_start)
arun_owed_hook = sync_to_async(queue.run_owed_hook)


async def ajob_get(job_id: int) -> Job:
    """The job's row as stored now (its state, result and worker)."""
    return await Job.objects.aget(pk=job_id)
