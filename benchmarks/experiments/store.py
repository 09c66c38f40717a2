"""The experiment job's async face onto the database: an ``async`` twin of each service the
runner (``benchmarks.experiments.runner``) calls, in the manner of contrib.sessions' ``load``
/ ``aload``.

This module is the one place the experiment job wraps synchronous services with
``sync_to_async``, so the runner reads as plain ``await store.x(...)``. Each twin calls its
service by attribute at call time, so the service stays the single definition.
"""

from __future__ import annotations

from typing import Any, cast

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from benchmarks import audit
from benchmarks import services as sweep_services
from benchmarks.experiments import recording, selectors, services
from benchmarks.experiments.recording import ExperimentPlan, StepPlan
from benchmarks.models import Sweep
from hosts.models import ServerInstance, ServerProfile


async def aexperiment_begin(*, experiment_id: int) -> ExperimentPlan | None:
    return await sync_to_async(recording.experiment_begin)(experiment_id=experiment_id)


async def aexperiment_step_update(
    *,
    step_id: int,
    state: str,
    reason: str | None = None,
    instance_id: int | None = recording.UNSET,
    environment: dict[str, Any] | None = None,
    equivalence: dict[str, Any] | None = None,
) -> None:
    await sync_to_async(recording.experiment_step_update)(
        step_id=step_id,
        state=state,
        reason=reason,
        instance_id=instance_id,
        environment=environment,
        equivalence=equivalence,
    )


async def aexperiment_step_start(
    *, step_id: int, profile: ServerProfile, user: Any = None
) -> ServerInstance:
    return await sync_to_async(recording.experiment_step_start)(
        step_id=step_id, profile=profile, user=user
    )


async def aexperiment_step_sweep(
    *,
    plan: ExperimentPlan,
    step: StepPlan,
    instance_id: int | None,
    host_probe: dict[str, Any],
    endpoint: ServerProfile | None = None,
) -> Sweep:
    return await sync_to_async(recording.experiment_step_sweep)(
        plan=plan, step=step, instance_id=instance_id, host_probe=host_probe, endpoint=endpoint
    )


async def aexperiment_history_note(*, experiment_id: int, entry: dict[str, Any]) -> None:
    await sync_to_async(services.experiment_history_note)(experiment_id=experiment_id, entry=entry)


async def aexperiment_finish(
    *, experiment_id: int, state: str, reason: str = "", evidence: dict[str, Any] | None = None
) -> bool:
    return await sync_to_async(recording.experiment_finish)(
        experiment_id=experiment_id, state=state, reason=reason, evidence=evidence
    )


async def aaudit_experiment_store(*, experiment_id: int) -> audit.AuditReport:
    return await sync_to_async(audit.audit_experiment_store)(experiment_id=experiment_id)


async def asweep_resume(
    *, sweep: Sweep, user: Any = None, instance: ServerInstance | None = None
) -> Sweep:
    return await sync_to_async(sweep_services.sweep_resume)(
        sweep=sweep, user=user, instance=instance
    )


async def asweep_cancel(*, sweep: Sweep, user: Any = None) -> Sweep:
    return await sync_to_async(sweep_services.sweep_cancel)(sweep=sweep, user=user)


async def aexperiment_snapshot(*, experiment_id: int) -> dict[str, Any] | None:
    """For the experiment page's consumer: Channels' wrap closes stale connections around it."""
    snapshot = await database_sync_to_async(selectors.experiment_snapshot)(
        experiment_id=experiment_id
    )
    return cast(dict[str, Any] | None, snapshot)
