"""The experiment job's async face onto the database: an ``async`` twin of each service the
runner (``benchmarks.experiments.runner``) awaits, in the manner of contrib.sessions' ``load``
/ ``aload``.

This module is the one place the experiment job wraps synchronous services with
``sync_to_async``, so the runner reads as plain ``await store.x(...)``. Each twin is its
service wrapped once: its signature is the service's own (asgiref types the wrap with the
service's parameters), so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any, cast

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from benchmarks import audit
from benchmarks import services as sweep_services
from benchmarks.experiments import recording, selectors, services

aexperiment_begin = sync_to_async(recording.experiment_begin)
aexperiment_step_update = sync_to_async(recording.experiment_step_update)
aexperiment_step_start = sync_to_async(recording.experiment_step_start)
aexperiment_step_sweep = sync_to_async(recording.experiment_step_sweep)
aexperiment_history_note = sync_to_async(services.experiment_history_note)
aexperiment_finish = sync_to_async(recording.experiment_finish)
aaudit_experiment_store = sync_to_async(audit.audit_experiment_store)
asweep_resume = sync_to_async(sweep_services.sweep_resume)
asweep_cancel = sync_to_async(sweep_services.sweep_cancel)


async def aexperiment_snapshot(*, experiment_id: int) -> dict[str, Any] | None:
    """For the experiment page's consumer: Channels' wrap closes stale connections around it."""
    snapshot = await database_sync_to_async(selectors.experiment_snapshot)(
        experiment_id=experiment_id
    )
    return cast(dict[str, Any] | None, snapshot)
