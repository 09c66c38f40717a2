"""What the ``experiment.run`` job (benchmarks.experiments.runner) records as it goes: the
plan it runs, each step's state, server and sweep, the comparison, the end. Sync; the async
job calls these through ``sync_to_async``. Re-exported by ``benchmarks.experiments.services``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from benchlib.json_types import JsonObject
from benchmarks.experiments import axes, builds
from benchmarks.experiments.axes import ArmLoad
from benchmarks.experiments.environment import (
    run_environment_record,
)
from benchmarks.experiments.equivalence import EquivalenceCheck
from benchmarks.experiments.events import broadcast_state as _broadcast_state
from benchmarks.experiments.events import broadcast_step as _broadcast_step
from benchmarks.experiments.events import close_steps as _close_steps
from benchmarks.experiments.models import (
    FINISHED_STEP_STATES,
    Experiment,
    ExperimentState,
    ExperimentStep,
    StepState,
)
from benchmarks.sweeps.models import Sweep
from benchmarks.sweeps.services import sweep_create
from hosts import services as host_services
from hosts.models import ServerInstance, ServerProfile

if TYPE_CHECKING:
    from benchmarks.experiments.stops import HostProbe


@dataclass(frozen=True)
class StepPlan:
    step_id: int
    index: int
    label: str
    repeat: int
    profile_id: int
    profile_name: str
    # The arm's own load settings (benchmarks.experiments.axes), over the experiment's.
    arm_load: ArmLoad = field(default_factory=lambda: ArmLoad())


@dataclass(frozen=True)
class ExperimentPlan:
    experiment_id: int
    name: str
    levels: list[int]
    # The load settings as stored (their JSON form, checked by LoadSettings when created).
    load: JsonObject
    repeats: int
    notes: str
    tags: list[str]
    continue_on_start_failure: bool
    check_output_equivalence: bool
    steps: list[StepPlan]
    user: Any


def experiment_begin(*, experiment_id: int) -> ExperimentPlan | None:
    """Mark a queued experiment running and return its plan; None if no longer queued."""
    with transaction.atomic():
        # A resumed experiment keeps its first start time.
        updated = Experiment.objects.filter(pk=experiment_id, state=ExperimentState.QUEUED).update(
            state=ExperimentState.RUNNING,
            started_at=Coalesce(F("started_at"), Value(timezone.now())),
        )
        if not updated:
            return None
        _broadcast_state(experiment_id)
    experiment = Experiment.objects.select_related("created_by").get(pk=experiment_id)
    steps = [
        StepPlan(
            step_id=s.pk,
            index=s.index,
            label=s.arm.label,
            repeat=s.repeat,
            profile_id=s.arm.profile_id,
            profile_name=s.arm.profile.name,
            # Stored by ``experiment_create`` as ``axes.arm_load_clean`` returned it.
            arm_load=cast(ArmLoad, dict(s.arm.load or {})),
        )
        for s in ExperimentStep.objects.filter(experiment_id=experiment_id)
        .select_related("arm__profile")
        .order_by("index")
    ]
    return ExperimentPlan(
        experiment_id=experiment_id,
        name=experiment.name,
        levels=list(experiment.levels),
        load=dict(experiment.load),
        repeats=experiment.repeats,
        notes=experiment.notes,
        tags=list(experiment.tags),
        continue_on_start_failure=experiment.continue_on_start_failure,
        check_output_equivalence=experiment.check_output_equivalence,
        steps=steps,
        user=experiment.created_by,
    )


_UNSET: Any = object()


def experiment_step_update(
    *,
    step_id: int,
    state: str,
    reason: str | None = None,
    instance_id: int | None = _UNSET,
    environment: HostProbe | None = None,
    equivalence: EquivalenceCheck | None = None,
) -> None:
    """Move a step on; it gets its start time when it leaves pending, its end when final."""
    with transaction.atomic():
        step = ExperimentStep.objects.select_for_update().get(pk=step_id)
        now = timezone.now()
        step.state = state
        if reason is not None:
            step.reason = reason
        if instance_id is not _UNSET:
            step.instance_id = instance_id
        if environment is not None:
            step.environment = environment
        if equivalence is not None:
            step.equivalence = equivalence
        if step.started_at is None and state != StepState.PENDING:
            step.started_at = now
        if state in FINISHED_STEP_STATES and step.finished_at is None:
            step.finished_at = now
        step.save()
        _broadcast_step(step_id)


def experiment_step_start(
    *, step_id: int, profile: ServerProfile, user: Any = None
) -> ServerInstance:
    """Start the step's server and record it on the step, in one transaction."""
    with transaction.atomic():
        # The experiment's own job asks: its worker is alive by definition.
        instance = host_services.instance_start(profile=profile, user=user, require_worker=False)
        experiment_step_update(step_id=step_id, state=StepState.STARTING, instance_id=instance.pk)
    return instance


def experiment_step_sweep(
    *,
    plan: ExperimentPlan,
    step: StepPlan,
    instance_id: int | None,
    host_probe: HostProbe,
    endpoint: ServerProfile | None = None,
) -> Sweep:
    """Create the step's sweep against its READY instance (or, for an endpoint profile's
    arm, against the endpoint's URL) and move the step to sweeping."""
    with transaction.atomic():
        instance = ServerInstance.objects.get(pk=instance_id) if instance_id is not None else None
        repeat = f" #{step.repeat + 1}" if plan.repeats > 1 else ""
        sweep = sweep_create(
            instance=instance,
            endpoint=endpoint,
            levels=plan.levels,
            # The sweep stores the load it ran: the experiment's with the arm's own over it.
            load=axes.arm_run_load(plan.load, step.arm_load),
            name=f"{plan.name} · {step.label}{repeat}"[:200],
            notes=plan.notes,
            tags=[*plan.tags, f"experiment:{plan.experiment_id}", f"arm:{step.label}"],
            user=plan.user,
            require_worker=False,
        )
        sweep.experiment_step_id = step.step_id
        # The sweep's environment (argv, env, server_info) plus what the host said about its GPUs,
        # and the run's environment record (appended: a record is never rewritten).
        record = run_environment_record(
            sweep_environment=sweep.environment,
            probe=host_probe,
            gpu_ids=instance.gpu_ids if instance is not None else [],
        )
        records = [*sweep.environment.get("records", []), record]
        sweep.environment = {**sweep.environment, "host_probe": host_probe, "records": records}
        sweep.save(update_fields=["experiment_step", "environment"])
        experiment_step_update(step_id=step.step_id, state=StepState.SWEEPING)
    return sweep


def experiment_skip_remaining(*, experiment_id: int, state: str, reason: str) -> None:
    with transaction.atomic():
        _close_steps(experiment_id, state, reason)


def experiment_store_comparison(*, experiment_id: int) -> builds.StoredComparison:
    """Build the comparison (and the schedule) from the experiment's sweeps and keep them on
    the experiment, here on the caller's thread (the worker builds it in a child process:
    ``builds.experiment_store_comparison_off_worker``)."""
    result = builds.comparison_from_inputs(builds.comparison_inputs(experiment_id=experiment_id))
    builds.experiment_save_comparison(experiment_id=experiment_id, result=result)
    return result


def experiment_finish(
    *, experiment_id: int, state: str, reason: str = "", evidence: JsonObject | None = None
) -> bool:
    """End an experiment; steps still pending are skipped (cancelled when it was cancelled).
    A reason recorded earlier (who cancelled) is kept. False if it had already ended."""
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().filter(pk=experiment_id).first()
        if experiment is None or experiment.is_finished:
            return False
        experiment.state = state
        if not (experiment.reason and state == ExperimentState.CANCELLED):
            experiment.reason = reason
        if evidence is not None:
            experiment.evidence = evidence
        experiment.finished_at = timezone.now()
        experiment.save(update_fields=["state", "reason", "evidence", "finished_at"])
        # An interrupted experiment keeps its pending steps: they are what a resume runs.
        if state != ExperimentState.INTERRUPTED:
            left = StepState.CANCELLED if state == ExperimentState.CANCELLED else StepState.SKIPPED
            _close_steps(experiment_id, left, f"the experiment ended {state}")
        _broadcast_state(experiment_id)
    return True
