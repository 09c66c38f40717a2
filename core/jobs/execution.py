"""One claimed job driven to an honest end: its handler, then one fenced write of how it ended.

Apart from the worker's loop (worker.py), which claims, renews, fences and cancels many jobs at
once: this is what happens to each of them, read top to bottom. Every path records an honest
state (succeeded, cancelled, cancelled and forced, interrupted by a shutdown or by the database,
failed) in a write fenced by the job's lease, then runs the kind's owed hook. The loop and the
runs share two sets, held here: the jobs whose end is being written and the jobs whose cancel
the loop forced past its grace.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable

from django.db import DatabaseError

from core.jobs import store
from core.jobs.registry import JobContext, JobResult, LeaseLost, handler_for
from core.models import JobHook, JobState

logger = logging.getLogger(__name__)

CANCELLED_REASON = "cancelled on request; stopped within the grace"
FORCED_REASON = "cancelled on request; did not stop within the grace; forced"


class JobRuns:
    """How one worker's jobs end (each run is one of the worker's asyncio tasks)."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        # Jobs whose end is being written: a renewal that matches no row meanwhile is the end
        # itself landing first, not a reap (the end's own write says if it was a reap).
        self.ending: set[int] = set()
        # Jobs the loop cancelled outright past their cancel grace: recorded as forced.
        self.forced: set[int] = set()

    async def drive(self, ctx: JobContext, *, ended: Callable[[], object]) -> None:
        """Run the job's handler and record how it ended; ``ended`` is called as soon as that
        end is written (from then on the job holds no lease). A cancel of this task that is
        not the job's own (a shutdown) is re-raised once the interruption is recorded."""
        handler = handler_for(ctx.kind)
        try:
            if handler is None:
                raise LookupError(f"no handler for job kind {ctx.kind!r}")
            result = await handler(ctx)
            ctx.check_lease()
            if ctx.cancelled.is_set():
                state, error = JobState.CANCELLED, CANCELLED_REASON
            else:
                state, error = JobState.SUCCEEDED, ""
            if not await self._end(ctx, ended, state=state, result=result, error=error):
                self._report_loss(ctx, f"not recording {state}")
        except LeaseLost as exc:
            ctx.lost = ctx.lost or str(exc)
            self._report_loss(ctx, "stopped driving it")
        except asyncio.CancelledError:
            if ctx.lost:
                self._report_loss(ctx, "stopped driving it")
                return
            if ctx.job_id in self.forced:
                # The user asked for this cancel: the record says so, and the kind's clean-up
                # (owed in the same write, so it survives this worker) deals with the rest.
                await self._end(
                    ctx,
                    ended,
                    state=JobState.CANCELLED,
                    error=FORCED_REASON,
                    hook_owed=JobHook.CANCEL_FORCED,
                )
                await store.arun_owed_hook(ctx.job_id)
                return
            if await self._end(
                ctx,
                ended,
                state=JobState.INTERRUPTED,
                error="worker shut down",
                hook_owed=JobHook.INTERRUPTED,
            ):
                await store.arun_owed_hook(ctx.job_id)
            raise
        except Exception as exc:
            logger.exception("job %s (%s) failed", ctx.job_id, ctx.kind)
            error = f"{exc}\n{traceback.format_exc(limit=8)}"
            # A job cut by the database refusing its writes did not fail at its own work: it
            # is recorded interrupted with its kind's hook owed (a server's run is adopted, so
            # a Stop issued meanwhile is carried out), as the reaper records an expired lease.
            cut_by_database = isinstance(exc, DatabaseError)
            try:
                recorded = await self._end(
                    ctx,
                    ended,
                    state=JobState.INTERRUPTED if cut_by_database else JobState.FAILED,
                    error=f"the database refused the job's writes: {error}"
                    if cut_by_database
                    else error,
                    hook_owed=JobHook.INTERRUPTED if cut_by_database else "",
                )
            except DatabaseError as db_exc:
                # Its row stays running with a lease nobody renews: the reaper records the
                # interruption (and runs its hook) once the database takes writes again.
                ctx.lost = ctx.lost or f"its failure could not be recorded ({db_exc})"
                recorded = False
            if not recorded:
                self._report_loss(ctx, "not recording its failure")
            elif cut_by_database:
                await store.arun_owed_hook(ctx.job_id)

    async def _end(
        self,
        ctx: JobContext,
        ended: Callable[[], object],
        *,
        state: str,
        result: JobResult | None = None,
        error: str = "",
        hook_owed: str = "",
    ) -> bool:
        self.ending.add(ctx.job_id)
        try:
            recorded = await store.ajob_finish(
                job_id=ctx.job_id,
                worker_id=self.worker_id,
                state=state,
                result=result,
                error=error,
                hook_owed=hook_owed,
            )
        finally:
            self.ending.discard(ctx.job_id)
        if recorded:
            # Its end is written: no lease is held from here on, so a renewal (which now
            # matches no running row) must not take it for lost and cancel what follows,
            # the kind's owed hook (the server's run adopted) among it.
            ended()
        return recorded

    def _report_loss(self, ctx: JobContext, what: str) -> None:
        logger.warning(
            "job %s is no longer run by worker %s (%s): %s",
            ctx.job_id,
            self.worker_id,
            ctx.lost or "its row is no longer running under this worker",
            what,
        )
