"""An experiment's measurement protocol and what it says about its own comparison.

``experiment_protocol`` (a selector) reads how the experiment was run (repeats, order, the
run order it planned), which interval its levels get (``benchlib.stats.intervals``: from the
repeats, which hold run-to-run variance, or the single-run mode's batch means over one run's
requests, which do not) and, per candidate arm and level, the drift and the order effect
(``benchlib.stats.drift``). It is stored under ``"protocol"`` beside the comparison when the
experiment ends, so that the decision can hold a level whose drift exceeds the margin
*inconclusive*, and every surface can say what its interval includes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict, cast

from benchlib.stats.drift import ArmDrift, LevelDrift, Run, experiment_drift, level_drift
from benchlib.stats.intervals import interval_scope
from benchmarks.experiments.environment import RunRecord, experiment_environment_differences
from benchmarks.experiments.models import Experiment, ExperimentStep
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel

if TYPE_CHECKING:
    from benchmarks.experiments.builds import StoredComparison

# The figure drift is measured on: the one the comparison ranks by default.
DRIFT_METRIC = "output_tok_s"


class ProtocolRecord(TypedDict):
    """How an experiment was measured (``experiment_protocol``); kept with its comparison."""

    repeats: int
    order: str
    mode: str  # "repeats" or "single-run"
    run_order: list[str]  # the arms' labels in the order their steps ran
    interval_method: str
    interval_scope: str
    metric: str
    drift: dict[str, list[dict[str, Any]]]  # candidate label -> LevelDrift.as_dict() per level


class ProtocolRun(TypedDict):
    """One run of an arm (``experiment_protocol_report``) with its environment records."""

    step: int
    label: str
    repeat: int
    sweep_id: int
    records: list[RunRecord]


class ProtocolReport(TypedDict):
    """How an experiment ran its arms (``experiment_protocol_report``; the API's
    ``ProtocolOut``)."""

    protocol: ProtocolRecord
    environment_differences: dict[str, list[str]]
    runs: list[ProtocolRun]


def protocol_interval_method(repeats: int, levels: int = 2) -> str:
    """The interval method a level of an experiment with ``repeats`` runs per arm and
    ``levels`` completed levels gets when every run completed it
    (``benchlib.stats.intervals.ratio_curve``'s choice: the run-to-run variance pooled over
    the levels when there are two or more, batch means over one run's requests without
    repeats)."""
    if repeats >= 2:
        return "repeats-pooled-log-t" if levels >= 2 else "repeats-log-t"
    return "batch-means-log-t"


def _runs(experiment: Experiment, metric: str) -> dict[int, list[Run]]:
    steps = {
        s.pk: s for s in ExperimentStep.objects.filter(experiment=experiment).select_related("arm")
    }
    by_level: dict[int, list[Run]] = {}
    levels = SweepLevel.objects.filter(
        sweep__experiment_step__experiment=experiment, state=LevelState.COMPLETED
    ).values_list("sweep__experiment_step_id", "concurrency", metric)
    for step_id, concurrency, value in levels:
        if value is None or value <= 0:
            continue
        step = steps[step_id]
        by_level.setdefault(concurrency, []).append(
            Run(position=step.index, arm=step.arm.label, repeat=step.repeat, value=float(value))
        )
    return by_level


def experiment_protocol(*, experiment: Experiment, metric: str = DRIFT_METRIC) -> ProtocolRecord:
    """How ``experiment`` was measured and its drift and order effect per arm and level:
    ``{"repeats", "order", "mode", "run_order", "interval_method", "interval_scope",
    "metric", "drift": {candidate label: [LevelDrift.as_dict(), ...]}}``; the reference is A."""
    steps = list(
        ExperimentStep.objects.filter(experiment=experiment).select_related("arm").order_by("index")
    )
    labels = sorted({s.arm.label for s in steps})
    by_level = _runs(experiment, metric)
    method = protocol_interval_method(experiment.repeats, len(by_level))
    drift: dict[str, list[dict[str, Any]]] = {}
    if labels:
        reference = labels[0]
        for candidate in labels[1:]:
            pair = {reference, candidate}
            drift[candidate] = [
                level_drift(
                    c, [r for r in runs if r.arm in pair], reference=reference, candidate=candidate
                ).as_dict()
                for c, runs in sorted(by_level.items())
            ]
    return {
        "repeats": experiment.repeats,
        "order": experiment.order,
        "mode": "repeats" if experiment.repeats >= 2 else "single-run",
        "run_order": [s.arm.label for s in steps],
        "interval_method": method,
        "interval_scope": interval_scope(method),
        "metric": metric,
        "drift": drift,
    }


def protocol_drift(protocol: ProtocolRecord) -> dict[str, dict[int, float]]:
    """Candidate label -> C -> the drift the decision compares with the margin, from a protocol
    record (what ``comparison_build`` hands the decision): the experiment's drift over its
    levels (``benchlib.stats.drift.experiment_drift``), the same at every level whose arms ran
    twice; levels without two runs of an arm left out."""
    out: dict[str, dict[int, float]] = {}
    for label, levels in (protocol.get("drift") or {}).items():
        measured = [level for level in levels if level.get("drift") is not None]
        drifts = [
            LevelDrift(
                concurrency=int(level["concurrency"]),
                reference=str(level["reference"]),
                candidate=str(level["candidate"]),
                arms=tuple(
                    ArmDrift(
                        arm=str(arm["arm"]),
                        runs=int(arm["runs"]),
                        first=float(arm["first"]),
                        last=float(arm["last"]),
                        first_position=int(arm["first_position"]),
                        last_position=int(arm["last_position"]),
                    )
                    for arm in level["arms"]
                ),
                order_effect=level.get("order_effect"),
                reference_first_pairs=int(level["reference_first_pairs"]),
                candidate_first_pairs=int(level["candidate_first_pairs"]),
            )
            for level in measured
        ]
        size = experiment_drift(drifts)
        if size is not None:
            out[label] = {drift.concurrency: size for drift in drifts}
    return out


def experiment_protocol_report(*, experiment: Experiment) -> ProtocolReport:
    """The protocol record, the arms' environment differences and every run's environment
    records: as stored with a finished experiment's comparison, else computed from the runs
    so far (``GET /api/v1/experiments/{id}/protocol``)."""
    stored = cast("StoredComparison", experiment.comparison if experiment.is_finished else {})
    protocol = stored.get("protocol") or experiment_protocol(experiment=experiment)
    differences = stored.get("environment_differences")
    if differences is None:
        differences = experiment_environment_differences(experiment_id=experiment.pk)
    runs: list[ProtocolRun] = [
        {
            "step": step_index + 1,
            "label": label,
            "repeat": repeat,
            "sweep_id": sweep_id,
            "records": list((environment or {}).get("records") or []),
        }
        for sweep_id, step_index, label, repeat, environment in Sweep.objects.filter(
            experiment_step__experiment=experiment
        )
        .order_by("experiment_step__index")
        .values_list(
            "pk",
            "experiment_step__index",
            "experiment_step__arm__label",
            "experiment_step__repeat",
            "environment",
        )
    ]
    return {"protocol": protocol, "environment_differences": differences, "runs": runs}
