"""The ``experiment.*`` events of an experiment's group on the channel layer
(core.realtime), sent after commit, and the history rows the experiment page lists."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from django.utils import timezone

from benchmarks.experiments import selectors
from benchmarks.experiments.models import Experiment, ExperimentStep, StepState
from benchmarks.experiments.selectors import ExperimentRow, StepRow
from core import realtime
from core.realtime import ChannelEvent


class ExperimentStatePayload(TypedDict):
    experiment_id: int
    experiment: ExperimentRow


class ExperimentStepPayload(TypedDict):
    experiment_id: int
    step: StepRow


class HistoryEntry(TypedDict):
    """One line of the experiment's history (what happened to it, by whom or why, and where),
    as the page lists it; ``history_add`` stamps its time."""

    event: str
    reason: NotRequired[str]
    by: NotRequired[str]
    at: NotRequired[list[str]]  # the steps in progress when it happened
    step: NotRequired[int]  # 1-based
    sweep: NotRequired[int]
    instance: NotRequired[int]


EXPERIMENT_STATE = ChannelEvent("experiment.state", ExperimentStatePayload)
EXPERIMENT_STEP = ChannelEvent("experiment.step", ExperimentStepPayload)


def broadcast_state(experiment_id: int) -> None:
    experiment = Experiment.objects.get(pk=experiment_id)
    row = selectors.experiment_as_dict(experiment)
    EXPERIMENT_STATE.broadcast_on_commit(
        realtime.experiment_group(experiment_id),
        {"experiment_id": experiment_id, "experiment": row},
    )


def broadcast_step(step_id: int) -> None:
    step = (
        ExperimentStep.objects.select_related("arm__profile", "instance", "sweep")
        .filter(pk=step_id)
        .first()
    )
    if step is None:
        return
    row = selectors.step_as_dict(step)
    EXPERIMENT_STEP.broadcast_on_commit(
        realtime.experiment_group(step.experiment_id),
        {"experiment_id": step.experiment_id, "step": row},
    )


def close_steps(experiment_id: int, state: str, reason: str) -> None:
    """Pending steps (never started) end as ``state``: skipped or cancelled."""
    now = timezone.now()
    for step_id in ExperimentStep.objects.filter(
        experiment_id=experiment_id, state=StepState.PENDING
    ).values_list("pk", flat=True):
        ExperimentStep.objects.filter(pk=step_id).update(
            state=state, reason=reason, finished_at=now
        )
        broadcast_step(step_id)


def history_add(experiment_id: int, entry: HistoryEntry) -> None:
    """Append to the experiment's history (the row is locked by the caller's transaction)."""
    experiment = Experiment.objects.select_for_update().get(pk=experiment_id)
    experiment.history = [*experiment.history, {"t": timezone.now().isoformat(), **entry}]
    experiment.save(update_fields=["history"])
