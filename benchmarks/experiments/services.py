"""Write-side actions on experiments.

Web requests create, cancel and resume experiments; the ``experiment.run`` job
(benchmarks.experiments.runner) records what it does through the recording functions of
``benchmarks.experiments.recording`` (import them from there), and the job hooks below end an
interrupted or force-cancelled one. Every change emits its ``experiment.*`` event after
commit, on the experiment's group of the channel layer (``benchmarks.experiments.events``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from benchmarks.experiments import axes
from benchmarks.experiments.events import HistoryEntry
from benchmarks.experiments.events import broadcast_state as _broadcast_state
from benchmarks.experiments.events import broadcast_step as _broadcast_step
from benchmarks.experiments.events import close_steps as _close_steps
from benchmarks.experiments.events import history_add as _history_add
from benchmarks.experiments.models import (
    DEFAULT_ORDER,
    DEFAULT_REPEATS,
    FINISHED_STEP_STATES,
    Experiment,
    ExperimentArm,
    ExperimentOrder,
    ExperimentState,
    ExperimentStep,
    StepState,
)
from benchmarks.experiments.recording import experiment_finish, experiment_step_update
from benchmarks.sweeps.plan import is_rate_sweep
from benchmarks.sweeps.services import _clean_tags, run_cancel, sweep_clean_plan
from core.jobs import job_enqueue
from core.jobs.health import worker_require
from core.jobs.registry import JobParams
from core.models import Job
from hosts.models import ServerProfile

EXPERIMENT_JOB_KIND = "experiment.run"
MAX_PROFILES = 8
MAX_REPEATS = 10
LABELS = "ABCDEFGH"
# An experiment that keeps getting interrupted (a crash it causes itself) stops resuming.
MAX_AUTO_RESUMES = 20


def experiment_lock_key(experiment_id: int) -> str:
    return f"experiment:{experiment_id}"


def _run_job_enqueue(experiment_id: int, *, user: Any) -> Job:
    """The ``experiment.run`` job of a new or resumed experiment (one at a time per experiment:
    its lock key)."""
    return job_enqueue(
        kind=EXPERIMENT_JOB_KIND,
        params={"experiment_id": experiment_id},
        lock_key=experiment_lock_key(experiment_id),
        user=user,
    )


def experiment_step_order(*, arms: int, repeats: int, order: str) -> list[tuple[int, int]]:
    """(arm position, repeat) pairs in run order: A A B B (sequential) or A B B A
    (interleaved: each round runs the arms in the reverse order of the round before, so with
    2 repeats every arm's mean sits at the same time and a linear drift cancels out of B/A;
    A B C C B A with three arms, A B B A A B with three repeats)."""
    if order == ExperimentOrder.INTERLEAVED:
        rounds = [
            list(range(arms)) if r % 2 == 0 else list(reversed(range(arms))) for r in range(repeats)
        ]
        return [(a, r) for r, positions in enumerate(rounds) for a in positions]
    return [(a, r) for a in range(arms) for r in range(repeats)]


def _validate(
    *, profiles: Sequence[ServerProfile], levels: Sequence[Any], load: Mapping[str, object],
    repeats: Any, order: str, arm_loads: Sequence[Mapping[str, Any]],
) -> tuple[list[int], dict[str, Any], list[axes.ArmLoad]]:  # fmt: skip
    errors: dict[str, list[str]] = {}
    if len(profiles) < 2:
        errors["profiles"] = ["Choose at least two server profiles."]
    elif len(profiles) > MAX_PROFILES:
        errors["profiles"] = [f"At most {MAX_PROFILES} profiles per experiment."]
    if len(arm_loads) > len(profiles):
        errors["arm_loads"] = [
            f"{len(arm_loads)} arm loads for {len(profiles)} profiles: one per profile at most."
        ]
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 1 <= repeats <= MAX_REPEATS:
        errors["repeats"] = [f"Repeats must be a whole number from 1 to {MAX_REPEATS}."]
    if order not in ExperimentOrder.values:
        errors["order"] = [f"Choose one of {', '.join(ExperimentOrder.values)}."]
    cleaned_levels: list[int] = []
    cleaned_load: dict[str, Any] = {}
    # The same rules as a single sweep: each step becomes one.
    try:
        cleaned_levels, cleaned_load = sweep_clean_plan(levels, load)
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
    # Without a valid load the arms are told apart by what they set themselves.
    valid_load = cleaned_load if not errors else None
    cleaned_arm_loads = _validate_arms(profiles, cleaned_levels, valid_load, arm_loads, errors)
    if errors:
        raise ValidationError(errors)
    return cleaned_levels, cleaned_load, cleaned_arm_loads


def _validate_arms(
    profiles: Sequence[ServerProfile],
    levels: list[int],
    load: dict[str, Any] | None,
    arm_loads: Sequence[Mapping[str, Any]],
    errors: dict[str, list[str]],
) -> list[axes.ArmLoad]:
    """Each arm's own load settings (``axes.arm_load_clean``; ``load`` None: the experiment's
    was refused, so only compared), and no two arms alike: an arm may run another's profile
    only with another load (same server, other load)."""
    cleaned: list[axes.ArmLoad] = []
    seen: dict[tuple[int, str], str] = {}
    for i, profile in enumerate(profiles[: len(LABELS)]):
        label = LABELS[i]
        given = dict(arm_loads[i]) if i < len(arm_loads) else {}
        # Without the experiment's load (refused) the arms are only compared as given: the
        # caller raises on the errors already found, so ``cleaned`` is then never used.
        own: axes.ArmLoad = {}
        runs: Mapping[str, Any] = given
        if load is not None:
            try:
                own, runs = axes.arm_load_clean(levels=levels, load=load, arm_load=given)
            except ValidationError as exc:
                errors[axes.arm_load_field(label)] = [f"Arm {label}: {m}" for m in exc.messages]
                cleaned.append({})
                continue
        cleaned.append(own)
        key = (profile.pk, json.dumps(runs, sort_keys=True))
        if key in seen:
            errors["profiles"] = [
                f"Arms {seen[key]} and {label} run the same profile ({profile.name}) with the same "
                f"load: give one of them its own {' or '.join(axes.ARM_LOAD_AXES)}, or use repeats "
                "to run it again."
            ]
        seen.setdefault(key, label)
    return cleaned


def _load_text(arm_load: Mapping[str, Any]) -> str:
    """An arm's own load for its default title: "temperature 1", "api chat"."""
    items = (f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in arm_load.items())
    return ", ".join(items)


def experiment_create(
    *,
    profiles: Sequence[ServerProfile],
    levels: Sequence[int],
    load: Mapping[str, object],
    name: str = "",
    repeats: int = DEFAULT_REPEATS,
    order: str = DEFAULT_ORDER,
    continue_on_start_failure: bool = True,
    check_output_equivalence: bool = False,
    notes: str = "",
    tags: Sequence[str] = (),
    auto_resume: bool = False,
    arm_loads: Sequence[Mapping[str, Any]] = (),
    user: Any = None,
) -> Experiment:
    """Validate, plan the steps and queue the ``experiment.run`` job.

    ``arm_loads``: each arm's own load settings, in profile order (fewer: the rest have none),
    limited to the acceptance axes (``axes.ARM_LOAD_AXES``: the API and the temperature); its
    sweeps run ``load`` with them merged in. A profile may appear twice when the two arms'
    loads differ (same server, other load); the same profile with the same load is refused.

    ``auto_resume``: a worker that finds this experiment interrupted (its own restart, or a
    dead worker's expired lease) resumes it by itself, up to MAX_AUTO_RESUMES times.

    ``repeats`` and ``order`` default to the protocol (two runs per profile, A B B A);
    ``repeats=1`` is the single-run mode. ``profiles[0]`` is A, the reference every other
    profile is compared with. Raises
    ValidationError with errors keyed by field name.
    """
    profiles = list(profiles)
    cleaned_levels, cleaned_load, cleaned_arm_loads = _validate(
        profiles=profiles, levels=levels, load=load, repeats=repeats, order=order,
        arm_loads=list(arm_loads),
    )  # fmt: skip
    title = (
        name.strip()[:200]
        or " vs ".join(
            p.name + (f" ({_load_text(own)})" if own else "")
            for p, own in zip(profiles, cleaned_arm_loads, strict=True)
        )[:200]
    )
    worker_require(kind=EXPERIMENT_JOB_KIND)
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
            tags=_clean_tags(tags),  # one rule for sweeps and experiments
            created_by=user if user is not None and user.is_authenticated else None,
        )
        arms = ExperimentArm.objects.bulk_create(
            [
                ExperimentArm(
                    experiment=experiment,
                    profile=p,
                    label=LABELS[i],
                    position=i,
                    load=cleaned_arm_loads[i],
                )
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
        experiment.job = _run_job_enqueue(experiment.pk, user=user)
        experiment.save(update_fields=["job"])
    return experiment


def experiment_cancel(*, experiment: Experiment, user: Any = None) -> Experiment:
    """Cancel: a queued experiment at once; a running one when its job sees the request
    (it then cancels the sweep in progress and stops its server with a verified stop)."""

    def cancelled_before_start() -> None:
        _close_steps(experiment.pk, StepState.CANCELLED, "the experiment was cancelled")
        _broadcast_state(experiment.pk)

    run_cancel(
        experiment,
        user=user,
        on_cancelled=cancelled_before_start,
        on_requested=lambda: _broadcast_state(experiment.pk),
    )
    return experiment


def _job_error(job_id: int) -> str:
    """What the worker wrote on the experiment's job when it ended it ("" when nothing)."""
    return Job.objects.filter(pk=job_id).values_list("error", flat=True).first() or ""


def _end_running_steps(experiment_id: int, *, state: str, reason: str) -> list[str]:
    """End the steps in progress (started, not finished) of an experiment whose job ended
    under them; where they stood (``step 3 (sweeping)``), for its history."""
    running = ExperimentStep.objects.filter(experiment_id=experiment_id).exclude(
        state__in=[*FINISHED_STEP_STATES, StepState.PENDING]
    )
    at = [f"step {s.index + 1} ({s.get_state_display().lower()})" for s in running]
    for step in running:
        experiment_step_update(step_id=step.pk, state=state, reason=reason)
    return at


def experiment_on_interrupted(job_id: int, params: JobParams) -> None:
    """Interrupt hook (sync): the worker running the experiment died or shut down. The server
    of the step in progress is left to its own lifecycle job (which is adopted in turn).
    An experiment created with ``auto_resume`` is resumed at once by whoever runs the hook
    (the restarted worker, or the one that saw the dead worker's lease expire)."""
    experiment_id = int(params["experiment_id"])
    reason = f"interrupted: {_job_error(job_id) or 'its job worker stopped'}"
    with transaction.atomic():
        at = _end_running_steps(experiment_id, state=StepState.INTERRUPTED, reason=reason)
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


def experiment_on_cancel_forced(job_id: int, params: JobParams) -> None:
    """Forced-cancel hook (sync): the operator cancelled and the runner did not stop within the
    grace, so its task was cancelled outright. The experiment ends cancelled, saying so (never
    resumed automatically: a cancel is the operator's word); the server of the step in progress
    is left to its own lifecycle job, as after any cancel."""
    experiment_id = int(params["experiment_id"])
    reason = _job_error(job_id) or "cancelled on request; did not stop within the grace; forced"
    with transaction.atomic():
        at = _end_running_steps(experiment_id, state=StepState.CANCELLED, reason=reason)
        if experiment_finish(
            experiment_id=experiment_id, state=ExperimentState.CANCELLED, reason=reason
        ):
            _history_add(experiment_id, {"event": "cancelled", "reason": reason, "at": at})


AUTO_RESUMER = "auto-resume"


def experiment_history_note(*, experiment_id: int, entry: HistoryEntry) -> None:
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
    if not by:  # the auto-resumer is a worker's own hook: its worker is alive
        worker_require(kind=EXPERIMENT_JOB_KIND)
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
        job = _run_job_enqueue(experiment.pk, user=user)
        Experiment.objects.filter(pk=experiment.pk).update(job=job)
        _history_add(experiment.pk, {"event": "resumed", "by": who})
        _broadcast_state(experiment.pk)
    experiment.refresh_from_db()
    return experiment


def experiment_rerun(*, experiment: Experiment, user: Any = None) -> Experiment:
    """Run a finished experiment again with the same settings: a new experiment of the same
    profiles in the same order (A stays the reference), levels, load, protocol and options,
    its history naming the one it repeats. The page's Retry of a failed experiment and
    Re-run of any finished one; the original keeps what it measured."""
    experiment.refresh_from_db()
    if not experiment.is_finished:
        raise ValidationError(
            {"state": f"this experiment is {experiment.state}: re-run it once it has finished"}
        )
    arms = experiment.arms.select_related("profile").order_by("position")
    again = experiment_create(
        profiles=[arm.profile for arm in arms],
        arm_loads=[dict(arm.load or {}) for arm in arms],
        levels=list(experiment.levels),
        load=dict(experiment.load),
        name=experiment.name,
        repeats=experiment.repeats,
        order=experiment.order,
        continue_on_start_failure=experiment.continue_on_start_failure,
        check_output_equivalence=experiment.check_output_equivalence,
        notes=experiment.notes,
        tags=list(experiment.tags),
        auto_resume=experiment.auto_resume,
        user=user,
    )
    who = getattr(user, "username", "") or "the system"
    with transaction.atomic():
        _history_add(
            again.pk,
            {
                "event": "rerun",
                "by": who,
                "reason": f"same settings as experiment #{experiment.pk}",
            },
        )
    again.refresh_from_db()
    return again
