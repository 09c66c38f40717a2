"""The experiment job's async face onto the database: an ``async`` twin of each service the
runner (``benchmarks.experiments.runner``) awaits, in the manner of contrib.sessions' ``load``
/ ``aload``.

This module is the one place the experiment job wraps synchronous services with
``sync_to_async``, so the runner reads as plain ``await store.x(...)``. Each twin is its
service wrapped once: its signature is the service's own (asgiref types the wrap with the
service's parameters), so the two cannot drift apart.

The audit at the experiment's end is run through a function handed over by the app's wiring
(``register_experiment_audit``, from ``BenchmarksConfig.ready``): the audit reads both slices,
so it sits above them, and this slice does not import it.
"""

from __future__ import annotations

from typing import Protocol

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from benchlib.json_types import JsonObject
from benchmarks.experiments import builds, recording, selectors, services
from benchmarks.experiments.models import ExperimentStep
from benchmarks.handover import Handover
from benchmarks.sweeps.models import Sweep, SweepState
from benchmarks.sweeps.services import sweep_cancel, sweep_resume
from core.models import Job, JobState
from hosts import services as host_services
from hosts.models import GpuClaim, InstanceState, ServerInstance, ServerProfile
from hosts.models.instances import ACTIVE_STATES

aexperiment_begin = sync_to_async(recording.experiment_begin)
aexperiment_step_update = sync_to_async(recording.experiment_step_update)
aexperiment_step_start = sync_to_async(recording.experiment_step_start)
aexperiment_step_sweep = sync_to_async(recording.experiment_step_sweep)
aexperiment_history_note = sync_to_async(services.experiment_history_note)
aexperiment_finish = sync_to_async(recording.experiment_finish)
asweep_resume = sync_to_async(sweep_resume)
asweep_cancel = sync_to_async(sweep_cancel)


class ExperimentAudit(Protocol):
    """Audit an experiment and keep the outcome on it and its sweeps
    (``benchmarks.audit.audit_experiment_store``)."""

    def __call__(self, *, experiment_id: int) -> object: ...


_experiment_audit: Handover[ExperimentAudit] = Handover("experiment audit")
register_experiment_audit = _experiment_audit.register


async def aaudit_experiment_store(*, experiment_id: int) -> None:
    """The audit handed over by ``register_experiment_audit``, off the event loop."""
    await sync_to_async(_experiment_audit.get())(experiment_id=experiment_id)


# The comparison's build (``builds.experiment_store_comparison_off_worker``) reads its inputs
# and writes its result through these. Written as functions rather than wrapped once like the
# twins above: ``builds`` awaits them, so it imports this module while it is itself imported,
# and its services are looked up when called, after both modules have loaded.


async def acomparison_inputs(*, experiment_id: int) -> builds.ComparisonInputs:
    return await sync_to_async(builds.comparison_inputs)(experiment_id=experiment_id)


async def aexperiment_save_comparison(
    *, experiment_id: int, result: builds.StoredComparison
) -> None:
    await sync_to_async(builds.experiment_save_comparison)(
        experiment_id=experiment_id, result=result
    )


async def aexperiment_snapshot(*, experiment_id: int) -> JsonObject | None:
    """For the experiment page's consumer, which sends it as plain JSON: Channels' wrap
    closes stale connections around it."""
    snapshot = await database_sync_to_async(selectors.experiment_snapshot)(
        experiment_id=experiment_id
    )
    return dict(snapshot) if snapshot is not None else None


# Reads the runner polls and decides on: the async ORM already, gathered here so the runner
# itself holds no query.


async def astep_get(step_id: int) -> ExperimentStep:
    return await ExperimentStep.objects.aget(pk=step_id)


async def astep_sweep(step_id: int) -> Sweep | None:
    """The step's sweep, if it got one."""
    return await Sweep.objects.filter(experiment_step_id=step_id).afirst()


async def astep_has_sweep(step_id: int) -> bool:
    return await Sweep.objects.filter(experiment_step_id=step_id).aexists()


async def asteps_instance_ids(experiment_id: int) -> list[int]:
    """The servers the experiment's steps had, the last step's first."""
    return [
        i
        async for i in ExperimentStep.objects.filter(
            experiment_id=experiment_id, instance__isnull=False
        )
        .order_by("-index")
        .values_list("instance_id", flat=True)
    ]


async def asweep_get(sweep_id: int) -> Sweep:
    return await Sweep.objects.aget(pk=sweep_id)


async def asweep_busy_on(instance: ServerInstance) -> bool:
    """Whether a sweep is queued or running on the server."""
    return await Sweep.objects.filter(
        instance=instance, state__in=[SweepState.QUEUED, SweepState.RUNNING]
    ).aexists()


async def aprofile_get(profile_id: int, *, with_host: bool = False) -> ServerProfile:
    profiles = ServerProfile.objects.select_related("host") if with_host else ServerProfile.objects
    return await profiles.aget(pk=profile_id)


async def ainstance_get(instance_id: int, *, with_profile_and_host: bool = False) -> ServerInstance:
    instances = (
        ServerInstance.objects.select_related("profile", "host")
        if with_profile_and_host
        else ServerInstance.objects
    )
    return await instances.aget(pk=instance_id)


async def ainstance_active(instance_id: int) -> bool:
    return await ServerInstance.objects.filter(pk=instance_id, state__in=ACTIVE_STATES).aexists()


async def aready_instances(profile: ServerProfile) -> list[ServerInstance]:
    """The profile's READY servers with no stop asked, the most recently ready first."""
    return [
        instance
        async for instance in ServerInstance.objects.select_related("profile", "host")
        .filter(profile=profile, state=InstanceState.READY, stop_requested=False)
        .order_by("-ready_at")
    ]


async def ainstance_with_host(instance_id: int) -> ServerInstance:
    """The server with its host and container, to reach the host it runs on."""
    return await ServerInstance.objects.select_related("host", "profile__container").aget(
        pk=instance_id
    )


async def aprofile_with_host(profile_id: int) -> ServerProfile:
    """A profile with its host and container (an endpoint's host to probe, if it has one)."""
    return await ServerProfile.objects.select_related("host", "container").aget(pk=profile_id)


async def agpu_claims_left(instance_id: int) -> bool:
    return await GpuClaim.objects.filter(instance_id=instance_id).aexists()


async def alifecycle_busy(instance_id: int) -> bool:
    """Whether a lifecycle job of the instance is queued or running."""
    return await Job.objects.filter(
        lock_key=host_services.instance_lock_key(instance_id),
        state__in=[JobState.QUEUED, JobState.RUNNING],
    ).aexists()
