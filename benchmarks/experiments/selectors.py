"""Read-side queries for experiments, the comparison picker and a profile's history.

What a comparison is computed from (each arm's levels as a series) is read in
experiments/series.py.

The dicts built here are also the payloads of the ``experiment.*`` events, so the snapshot a
viewer gets on connecting and the events that follow have the same shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, TypedDict

from django.db.models import Prefetch, QuerySet

from benchmarks.controller_report import ControllerSection, tracks_context
from benchmarks.experiments.history import HistoryRun, history_load
from benchmarks.experiments.models import Experiment, ExperimentArm, ExperimentStep
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepState
from benchmarks.sweeps.plan import is_rate_sweep
from hosts.masking import masked_text
from hosts.models import ServerInstance, ServerProfile
from hosts.models.instances import HOLDING_STATES

if TYPE_CHECKING:
    from benchmarks.experiments.equivalence import EquivalenceCheck


def _epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def experiment_detail(*, experiment_id: int) -> Experiment | None:
    return (
        Experiment.objects.select_related("created_by", "job")
        .prefetch_related("arms__profile")
        .filter(pk=experiment_id)
        .first()
    )


def experiment_arms(*, experiment_id: int) -> list[ExperimentArm]:
    return list(
        ExperimentArm.objects.filter(experiment_id=experiment_id)
        .select_related("profile")
        .order_by("position")
    )


def experiment_steps(*, experiment_id: int) -> list[ExperimentStep]:
    return list(
        ExperimentStep.objects.filter(experiment_id=experiment_id)
        .select_related("arm__profile", "instance", "sweep")
        .order_by("index")
    )


def _sweep_of(step: ExperimentStep) -> Sweep | None:
    try:
        return step.sweep
    except Sweep.DoesNotExist:
        return None


class ExperimentRow(TypedDict):
    """An experiment's state, as its page and the ``experiment.state`` event show it."""

    id: int
    name: str
    state: str
    state_label: str
    finished: bool
    reason: str
    started_at: float | None  # epoch seconds
    finished_at: float | None
    has_comparison: bool


class StepRow(TypedDict):
    """One step of the plan (an arm's repeat) and how it went."""

    id: int
    index: int
    label: str  # the arm's
    profile: str
    endpoint: bool  # a server running outside specdash: the step starts and stops nothing
    repeat: int
    state: str
    state_label: str
    finished: bool
    reason: str
    instance_id: int | None
    instance_state: str | None
    sweep_id: int | None
    sweep_state: str | None
    started_at: float | None  # epoch seconds
    finished_at: float | None
    duration_s: float | None


class ExperimentSnapshot(TypedDict):
    """What the experiment page's socket sends first: the experiment and every step."""

    experiment: ExperimentRow
    steps: list[StepRow]


def step_as_dict(step: ExperimentStep) -> StepRow:
    sweep = _sweep_of(step)
    started, finished = step.started_at, step.finished_at
    return {
        "id": step.pk,
        "index": step.index,
        "label": step.arm.label,
        "profile": step.arm.profile.name,
        # A server running outside specdash: its step starts and stops nothing.
        "endpoint": step.arm.profile.is_endpoint,
        "repeat": step.repeat,
        "state": step.state,
        "state_label": step.get_state_display(),
        "finished": step.is_finished,
        # Masked as the page and the API mask it: it quotes the server's own reason.
        "reason": masked_text(step.reason),
        "instance_id": step.instance_id,
        "instance_state": step.instance.state if step.instance is not None else None,
        "sweep_id": sweep.pk if sweep is not None else None,
        "sweep_state": sweep.state if sweep is not None else None,
        "started_at": _epoch(started),
        "finished_at": _epoch(finished),
        "duration_s": (finished - started).total_seconds() if started and finished else None,
    }


def experiment_as_dict(experiment: Experiment) -> ExperimentRow:
    return {
        "id": experiment.pk,
        "name": experiment.name,
        "state": experiment.state,
        "state_label": experiment.get_state_display(),
        "finished": experiment.is_finished,
        "reason": masked_text(experiment.reason),
        "started_at": _epoch(experiment.started_at),
        "finished_at": _epoch(experiment.finished_at),
        "has_comparison": bool(experiment.comparison),
    }


def experiment_port_holder(*, experiment: Experiment) -> ServerInstance | None:
    """The server whose port a step could not start on (the runner notes it in the history),
    while it still holds it: the page offers to stop it, then Retry."""
    for entry in reversed(experiment.history or []):
        if entry.get("event") == "port_held" and entry.get("instance"):
            return (
                ServerInstance.objects.select_related("profile")
                .filter(pk=entry["instance"], state__in=sorted(HOLDING_STATES))
                .first()
            )
    return None


def experiment_current_step(*, steps: Sequence[ExperimentStep]) -> ExperimentStep | None:
    """The step in progress, else the last one that started."""
    started = [s for s in steps if s.started_at is not None]
    running = [s for s in started if not s.is_finished]
    if running:
        return running[-1]
    return started[-1] if started else None


def experiment_snapshot(*, experiment_id: int) -> ExperimentSnapshot | None:
    experiment = Experiment.objects.filter(pk=experiment_id).first()
    if experiment is None:
        return None
    steps = experiment_steps(experiment_id=experiment_id)
    return {
        "experiment": experiment_as_dict(experiment),
        "steps": [step_as_dict(s) for s in steps],
    }


def experiment_controller_tracks(*, experiment_id: int) -> list[ControllerSection]:
    """Controller tracking per concurrency across the experiment's runs (every arm on the same
    workload: the adaptive arm beside the static ones), from each level's stored per-second
    figures; one query that reads only the stored ``controller`` figures."""
    rows = (
        SweepLevel.objects.filter(
            sweep__experiment_step__experiment_id=experiment_id, summary__has_key="controller"
        )
        .order_by("sweep__experiment_step__index", "index")
        .values_list(
            "sweep__experiment_step__arm__label",
            "sweep__experiment_step__repeat",
            "concurrency",
            "summary__controller",
        )
    )
    runs = [
        (label if not repeat else f"{label} run {repeat + 1}", c, f"C={c}", figures)
        for label, repeat, c, figures in rows
    ]
    return tracks_context(runs, scope=f"experiment-{experiment_id}")


def experiment_profiles() -> QuerySet[ServerProfile]:
    return ServerProfile.objects.select_related("host").order_by("name")


def experiment_equivalence_runs(*, experiment: Experiment) -> dict[str, list[EquivalenceCheck]]:
    """Each arm's output checks (one per step that ran them), by arm label."""
    runs: dict[str, list[EquivalenceCheck]] = {}
    for step in experiment_steps(experiment_id=experiment.pk):
        if step.equivalence:
            runs.setdefault(step.arm.label, []).append(step.equivalence)
    return runs


def sweeps_by_ids(*, sweep_ids: Sequence[int]) -> list[Sweep]:
    """The sweeps asked for, in the order asked (unknown ids dropped)."""
    found = {s.pk: s for s in Sweep.objects.select_related("profile").filter(pk__in=sweep_ids)}
    return [found[i] for i in sweep_ids if i in found]


def rate_sweep_ids(*, sweeps: Sequence[Sweep]) -> list[int]:
    """The rate sweeps among ``sweeps``: their levels share one concurrency (the cap), so the
    comparisons, which pair levels by concurrency, cannot take them."""
    return [s.pk for s in sweeps if is_rate_sweep(s.load or {})]


# The picker and a profile's history list this many sweeps, newest first, and say so when
# there are more (the count comes from the *_total selectors beside them).
LIST_LIMIT = 200


def _comparable() -> QuerySet[Sweep]:
    return Sweep.objects.filter(
        state__in=[SweepState.COMPLETED, SweepState.CANCELLED, SweepState.FAILED],
        level_results__state=LevelState.COMPLETED,
    ).distinct()


def comparable_sweeps_total() -> int:
    """How many sweeps the picker could list (rate sweeps included), before its cut."""
    return _comparable().count()


def profile_history_total(*, profile_id: int) -> int:
    """How many of the profile's sweeps have a completed level, before the history's cut."""
    return (
        Sweep.objects.filter(profile_id=profile_id, level_results__state=LevelState.COMPLETED)
        .distinct()
        .count()
    )


def comparable_sweeps(*, limit: int | None = None) -> list[Sweep]:
    """Sweeps that finished with at least one completed level, newest first (the picker);
    rate sweeps are left out (see rate_sweep_ids)."""
    sweeps = list(
        _comparable()
        .select_related("profile", "experiment_step__experiment")
        .order_by("-created_at")[: limit or LIST_LIMIT]
    )
    rate = set(rate_sweep_ids(sweeps=sweeps))
    return [s for s in sweeps if s.pk not in rate]


def profile_history_runs(*, profile_id: int, limit: int | None = None) -> list[HistoryRun]:
    """The profile's latest sweeps with completed levels, oldest first."""
    levels = SweepLevel.objects.filter(state=LevelState.COMPLETED).order_by("concurrency")
    sweeps = list(
        Sweep.objects.filter(profile_id=profile_id, level_results__state=LevelState.COMPLETED)
        .distinct()
        .prefetch_related(Prefetch("level_results", queryset=levels, to_attr="completed"))
        .order_by("-created_at")[: limit or LIST_LIMIT]
    )
    sweeps.reverse()
    rate = set(rate_sweep_ids(sweeps=sweeps))  # levels keyed by C: a rate sweep has one C
    runs = []
    for s in sweeps:
        if s.pk in rate:
            continue
        key, label = history_load(levels=s.levels, load=s.load or {})
        runs.append(
            HistoryRun(
                sweep_id=s.pk,
                name=str(s),
                created_at=s.created_at,
                levels={lv.concurrency: lv.output_tok_s for lv in s.completed if lv.output_tok_s},
                tags=tuple(s.tags),
                load_key=key,
                load_label=label,
            )
        )
    return runs


def profile_detail(*, profile_id: int) -> ServerProfile | None:
    return ServerProfile.objects.filter(pk=profile_id).first()


def experiment_list() -> QuerySet[Experiment]:
    return Experiment.objects.prefetch_related("arms__profile")


def experiment_filter() -> QuerySet[Experiment]:
    """Experiments, newest first, for the API's list (its FilterSchema narrows them)."""
    return experiment_list().select_related("created_by").order_by("-created_at", "-pk")
