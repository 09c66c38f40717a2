"""Write-side actions on experiments.

Web requests create and cancel experiments; the ``experiment.run`` job
(benchmarks.experiments.runner) records what it does through the recording functions
below. Every change emits its ``experiment.*`` event after commit, on the experiment's
group of the channel layer (specdash.realtime).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from benchmarks import services as sweep_services
from benchmarks.experiments import comparison, selectors
from benchmarks.models import Experiment, ExperimentArm, ExperimentStep, StepState, Sweep
from benchmarks.models.experiments import FINISHED_STEP_STATES, ExperimentOrder, ExperimentState
from benchmarks.sweeps.plan import is_rate_sweep
from hosts import services as host_services
from hosts.jobs import job_cancel, job_enqueue
from hosts.models import JobState, ServerInstance, ServerProfile
from specdash import realtime

EXPERIMENT_JOB_KIND = "experiment.run"
EXPERIMENT_STATE = "experiment.state"  # {"experiment_id", "experiment": {...}}
EXPERIMENT_STEP = "experiment.step"  # {"experiment_id", "step": {...}}
MAX_PROFILES = 8
MAX_REPEATS = 10
LABELS = "ABCDEFGH"
# An experiment that keeps getting interrupted (a crash it causes itself) stops resuming.
MAX_AUTO_RESUMES = 20


def experiment_lock_key(experiment_id: int) -> str:
    return f"experiment:{experiment_id}"


def experiment_step_order(*, arms: int, repeats: int, order: str) -> list[tuple[int, int]]:
    """(arm position, repeat) pairs in run order: A A B B (sequential) or A B A B."""
    if order == ExperimentOrder.INTERLEAVED:
        return [(a, r) for r in range(repeats) for a in range(arms)]
    return [(a, r) for a in range(arms) for r in range(repeats)]


def _validate(
    *, profiles: Sequence[ServerProfile], levels: Sequence[Any], load: dict[str, Any],
    repeats: Any, order: str,
) -> tuple[list[int], dict[str, Any]]:  # fmt: skip
    errors: dict[str, list[str]] = {}
    if len(profiles) < 2:
        errors["profiles"] = ["Choose at least two server profiles."]
    elif len(profiles) > MAX_PROFILES:
        errors["profiles"] = [f"At most {MAX_PROFILES} profiles per experiment."]
    elif len({p.pk for p in profiles}) != len(profiles):
        errors["profiles"] = ["Each profile can appear once; use repeats to run it again."]
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        errors["repeats"] = [f"Repeats must be a whole number from 1 to {MAX_REPEATS}."]
    if order not in ExperimentOrder.values:
        errors["order"] = [f"Choose one of {', '.join(ExperimentOrder.values)}."]
    cleaned_levels: list[int] = []
    cleaned_load: dict[str, Any] = {}
    # The same rules as a single sweep: each step becomes one.
    try:
        cleaned_levels, cleaned_load = sweep_services.sweep_clean_plan(levels, load)
    except ValidationError as exc:
        if hasattr(exc, "error_dict"):
            errors.update(exc.message_dict)
        else:
            errors.setdefault("__all__", []).extend(exc.messages)
    if is_rate_sweep(cleaned_load):
        # The comparison pairs the arms' levels by concurrency (ratios, crossover, saturation).
        errors["request_rate"] = [
            "An experiment compares its profiles level by level at each concurrency: give one "
            "request rate (or none). A rate sweep (several rates) runs as a sweep of each server."
        ]
    if errors:
        raise ValidationError(errors)
    return cleaned_levels, cleaned_load


def experiment_create(
    *,
    profiles: Sequence[ServerProfile],
    levels: Sequence[int],
    load: dict[str, Any],
    name: str = "",
    repeats: int = 1,
    order: str = ExperimentOrder.SEQUENTIAL,
    continue_on_start_failure: bool = True,
    check_output_equivalence: bool = False,
    notes: str = "",
    tags: Sequence[str] = (),
    auto_resume: bool = False,
    user: Any = None,
) -> Experiment:
    """Validate, plan the steps and queue the ``experiment.run`` job.

    ``auto_resume``: a worker that finds this experiment interrupted (its own restart, or a
    dead worker's expired lease) resumes it by itself, up to MAX_AUTO_RESUMES times.

    ``profiles[0]`` is A, the reference every other profile is compared with. Raises
    ValidationError with errors keyed by field name.
    """
    profiles = list(profiles)
    cleaned_levels, cleaned_load = _validate(
        profiles=profiles, levels=levels, load=load, repeats=repeats, order=order
    )
    title = name.strip()[:200] or " vs ".join(p.name for p in profiles)[:200]
    with transaction.atomic():
        experiment = Experiment.objects.create(
            name=title,
            levels=cleaned_levels,
            load=cleaned_load,
            repeats=repeats,
            order=order,
            continue_on_start_failure=continue_on_start_failure,
            check_output_equivalence=check_output_equivalence,
            auto_resume=auto_resume,
            notes=notes,
            tags=sweep_services._clean_tags(tags),  # one rule for sweeps and experiments
            created_by=user if user is not None and user.is_authenticated else None,
        )
        arms = ExperimentArm.objects.bulk_create(
            [
                ExperimentArm(experiment=experiment, profile=p, label=LABELS[i], position=i)
                for i, p in enumerate(profiles)
            ]
        )
        ExperimentStep.objects.bulk_create(
            [
                ExperimentStep(experiment=experiment, index=i, arm=arms[a], repeat=r)
                for i, (a, r) in enumerate(
                    experiment_step_order(arms=len(arms), repeats=repeats, order=order)
                )
            ]
        )
        experiment.job = job_enqueue(
            kind=EXPERIMENT_JOB_KIND,
            params={"experiment_id": experiment.pk},
            lock_key=experiment_lock_key(experiment.pk),
            user=user,
        )
        experiment.save(update_fields=["job"])
    return experiment


def _broadcast_state(experiment_id: int) -> None:
    experiment = Experiment.objects.get(pk=experiment_id)
    realtime.broadcast_on_commit(
        realtime.experiment_group(experiment_id),
        EXPERIMENT_STATE,
        {"experiment_id": experiment_id, "experiment": selectors.experiment_as_dict(experiment)},
    )


def _broadcast_step(step_id: int) -> None:
    step = (
        ExperimentStep.objects.select_related("arm__profile", "instance", "sweep")
        .filter(pk=step_id)
        .first()
    )
    if step is None:
        return
    realtime.broadcast_on_commit(
        realtime.experiment_group(step.experiment_id),
        EXPERIMENT_STEP,
        {"experiment_id": step.experiment_id, "step": selectors.step_as_dict(step)},
    )


def _close_steps(experiment_id: int, state: str, reason: str) -> None:
    """Pending steps (never started) end as ``state``: skipped or cancelled."""
    now = timezone.now()
    for step_id in ExperimentStep.objects.filter(
        experiment_id=experiment_id, state=StepState.PENDING
    ).values_list("pk", flat=True):
        ExperimentStep.objects.filter(pk=step_id).update(
            state=state, reason=reason, finished_at=now
        )
        _broadcast_step(step_id)


def experiment_cancel(*, experiment: Experiment, user: Any = None) -> Experiment:
    """Cancel: a queued experiment at once; a running one when its job sees the request
    (it then cancels the sweep in progress and stops its server with a verified stop)."""
    if experiment.is_finished:
        return experiment
    who = getattr(user, "username", "") or "the system"
    job_state = job_cancel(job=experiment.job).state if experiment.job else JobState.CANCELLED
    with transaction.atomic():
        if job_state == JobState.CANCELLED:
            updated = Experiment.objects.filter(
                pk=experiment.pk, state=ExperimentState.QUEUED
            ).update(
                state=ExperimentState.CANCELLED,
                reason=f"cancelled by {who} before it started",
                finished_at=timezone.now(),
            )
            if updated:
                _close_steps(experiment.pk, StepState.CANCELLED, "the experiment was cancelled")
                _broadcast_state(experiment.pk)
        else:
            Experiment.objects.filter(
                pk=experiment.pk, state=ExperimentState.RUNNING, reason=""
            ).update(reason=f"cancelled by {who}")
            _broadcast_state(experiment.pk)
    experiment.refresh_from_db()
    return experiment


# -- recording what the runner does (sync; the async job calls these via sync_to_async) --


@dataclass(frozen=True)
class StepPlan:
    step_id: int
    index: int
    label: str
    repeat: int
    profile_id: int
    profile_name: str


@dataclass(frozen=True)
class ExperimentPlan:
    experiment_id: int
    name: str
    levels: list[int]
    load: dict[str, Any]
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
    environment: dict[str, Any] | None = None,
    equivalence: dict[str, Any] | None = None,
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
        instance = host_services.instance_start(profile=profile, user=user)
        experiment_step_update(step_id=step_id, state=StepState.STARTING, instance_id=instance.pk)
    return instance


def experiment_step_sweep(
    *, plan: ExperimentPlan, step: StepPlan, instance_id: int, host_probe: dict[str, Any]
) -> Sweep:
    """Create the step's sweep against its READY instance and move the step to sweeping."""
    with transaction.atomic():
        instance = ServerInstance.objects.get(pk=instance_id)
        repeat = f" #{step.repeat + 1}" if plan.repeats > 1 else ""
        sweep = sweep_services.sweep_create(
            instance=instance,
            levels=plan.levels,
            load=plan.load,
            name=f"{plan.name} · {step.label}{repeat}"[:200],
            notes=plan.notes,
            tags=[*plan.tags, f"experiment:{plan.experiment_id}", f"arm:{step.label}"],
            user=plan.user,
        )
        sweep.experiment_step_id = step.step_id
        # The sweep's environment (argv, env, server_info) plus what the host said about its GPUs.
        sweep.environment = {**sweep.environment, "host_probe": host_probe}
        sweep.save(update_fields=["experiment_step", "environment"])
        experiment_step_update(step_id=step.step_id, state=StepState.SWEEPING)
    return sweep


def experiment_skip_remaining(*, experiment_id: int, state: str, reason: str) -> None:
    with transaction.atomic():
        _close_steps(experiment_id, state, reason)


def experiment_store_comparison(*, experiment_id: int) -> dict[str, Any]:
    """Build the comparison from the experiment's sweeps and keep it on the experiment."""
    experiment = Experiment.objects.get(pk=experiment_id)
    result = comparison.comparison_build(
        series=selectors.experiment_series(experiment=experiment),
        equivalence_runs=selectors.experiment_equivalence_runs(experiment=experiment),
        slo=(experiment.load or {}).get("slo"),
    )
    Experiment.objects.filter(pk=experiment_id).update(comparison=result)
    return result


def experiment_finish(
    *, experiment_id: int, state: str, reason: str = "", evidence: dict[str, Any] | None = None
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


def _history_add(experiment_id: int, entry: dict[str, Any]) -> None:
    """Append to the experiment's history (the row is locked by the caller's transaction)."""
    experiment = Experiment.objects.select_for_update().get(pk=experiment_id)
    experiment.history = [*experiment.history, {"t": timezone.now().isoformat(), **entry}]
    experiment.save(update_fields=["history"])


def experiment_on_interrupted(job_id: int, params: dict[str, Any]) -> None:
    """Interrupt hook (sync): the worker running the experiment died or shut down. The server
    of the step in progress is left to its own lifecycle job (which is adopted in turn).
    An experiment created with ``auto_resume`` is resumed at once by whoever runs the hook
    (the restarted worker, or the one that saw the dead worker's lease expire)."""
    from hosts.models import Job

    experiment_id = int(params["experiment_id"])
    error = Job.objects.filter(pk=job_id).values_list("error", flat=True).first() or ""
    reason = f"interrupted: {error or 'its job worker stopped'}"
    with transaction.atomic():
        running = ExperimentStep.objects.filter(experiment_id=experiment_id).exclude(
            state__in=[*FINISHED_STEP_STATES, StepState.PENDING]
        )
        at = [f"step {s.index + 1} ({s.get_state_display().lower()})" for s in running]
        for step in running:
            experiment_step_update(step_id=step.pk, state=StepState.INTERRUPTED, reason=reason)
        if not experiment_finish(
            experiment_id=experiment_id, state=ExperimentState.INTERRUPTED, reason=reason
        ):
            return
        _history_add(experiment_id, {"event": "interrupted", "reason": reason, "at": at})
    experiment = Experiment.objects.get(pk=experiment_id)
    resumes = sum(1 for h in experiment.history if h.get("by") == AUTO_RESUMER)
    if experiment.auto_resume and resumes < MAX_AUTO_RESUMES:
        with contextlib.suppress(ValidationError):  # e.g. someone resumed it meanwhile
            experiment_resume(experiment=experiment, by=AUTO_RESUMER)


def experiment_on_cancel_forced(job_id: int, params: dict[str, Any]) -> None:
    """Forced-cancel hook (sync): the operator cancelled and the runner did not stop within the
    grace, so its task was cancelled outright. The experiment ends cancelled, saying so (never
    resumed automatically: a cancel is the operator's word); the server of the step in progress
    is left to its own lifecycle job, as after any cancel."""
    from hosts.models import Job

    experiment_id = int(params["experiment_id"])
    error = Job.objects.filter(pk=job_id).values_list("error", flat=True).first() or ""
    reason = error or "cancelled on request; did not stop within the grace; forced"
    with transaction.atomic():
        running = ExperimentStep.objects.filter(experiment_id=experiment_id).exclude(
            state__in=[*FINISHED_STEP_STATES, StepState.PENDING]
        )
        at = [f"step {s.index + 1} ({s.get_state_display().lower()})" for s in running]
        for step in running:
            experiment_step_update(step_id=step.pk, state=StepState.CANCELLED, reason=reason)
        if experiment_finish(
            experiment_id=experiment_id, state=ExperimentState.CANCELLED, reason=reason
        ):
            _history_add(experiment_id, {"event": "cancelled", "reason": reason, "at": at})


AUTO_RESUMER = "auto-resume"


def experiment_history_note(*, experiment_id: int, entry: dict[str, Any]) -> None:
    """What a resumed run decided (server re-used or replaced, sweep resumed), for the page."""
    with transaction.atomic():
        _history_add(experiment_id, entry)
        _broadcast_state(experiment_id)


def experiment_resume(*, experiment: Experiment, user: Any = None, by: str = "") -> Experiment:
    """Continue an interrupted experiment: a new ``experiment.run`` job that skips the steps
    that finished and picks up the first unfinished one where it stopped (its server re-used
    when still ready and unchanged, its sweep resumed from the first unfinished level; see
    runner.ExperimentRun). Steps keep their sweeps and servers; the history records it."""
    experiment.refresh_from_db()
    if experiment.state != ExperimentState.INTERRUPTED:
        raise ValidationError(
            {"state": f"only an interrupted experiment can be resumed (this one is "
                      f"{experiment.state})"}
        )  # fmt: skip
    who = by or getattr(user, "username", "") or "the system"
    with transaction.atomic():
        updated = Experiment.objects.filter(
            pk=experiment.pk, state=ExperimentState.INTERRUPTED
        ).update(state=ExperimentState.QUEUED, reason=f"resumed by {who}", finished_at=None)
        if not updated:
            raise ValidationError({"state": "the experiment changed meanwhile; reload and retry"})
        for step in ExperimentStep.objects.filter(
            experiment=experiment, state=StepState.INTERRUPTED
        ):
            # Back to pending, finished_at cleared; the runner sees its server and sweep.
            ExperimentStep.objects.filter(pk=step.pk).update(
                state=StepState.PENDING, reason=f"resuming after: {step.reason}", finished_at=None
            )
            _broadcast_step(step.pk)
        job = job_enqueue(
            kind=EXPERIMENT_JOB_KIND,
            params={"experiment_id": experiment.pk},
            lock_key=experiment_lock_key(experiment.pk),
            user=user,
        )
        Experiment.objects.filter(pk=experiment.pk).update(job=job)
        _history_add(experiment.pk, {"event": "resumed", "by": who})
        _broadcast_state(experiment.pk)
    experiment.refresh_from_db()
    return experiment
