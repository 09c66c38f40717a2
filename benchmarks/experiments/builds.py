"""An experiment's comparison and schedule, built away from the job worker.

The build reads every record of every arm and computes each level's intervals from them: minutes
at 100k requests. On the worker's shared sync thread it held up every other job's database
writes (a concurrent sweep's samples froze, its lease-fenced writes waited) for that long. So
it runs in three steps: the inputs are read from the database (``comparison_inputs``, quick),
the build runs in a child process on those inputs alone (``comparison_from_inputs``: records
files and arithmetic, no database), and the result is written back
(``experiment_save_comparison``). A process, not a thread: the build is pure Python between
numpy calls and would hold the GIL the event loop and the lease thread need.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import NotRequired

import django

from benchmarks.experiments import axes, comparison, schedule, selectors, store
from benchmarks.experiments.axes import ExperimentAxes
from benchmarks.experiments.comparison import Comparison
from benchmarks.experiments.environment import experiment_environment_differences
from benchmarks.experiments.equivalence import EquivalenceCheck
from benchmarks.experiments.level_runs import SeriesData
from benchmarks.experiments.models import Experiment
from benchmarks.experiments.protocol import ProtocolRecord, experiment_protocol, protocol_drift
from benchmarks.experiments.schedule import ScheduleReport
from benchmarks.experiments.series import experiment_arm_series, experiment_series, running_batches
from benchmarks.sweeps.recordfile import records_read_once


class StoredComparison(Comparison):
    """A comparison as kept on the experiment (``Experiment.comparison``) and read back by
    every surface: what ``comparison_build`` returns, with what ``comparison_from_inputs``
    adds before storing it. A running experiment's read (``stored``) adds only the axes; a
    comparison stored before schedules were kept gains its schedule later
    (``stored.experiment_store_schedule``); a compare-sweeps one has none of them."""

    protocol: NotRequired[ProtocolRecord]
    environment_differences: NotRequired[dict[str, list[str]]]
    # ``ExperimentAxes``' keys.
    declared_axis: NotRequired[list[str]]
    arm_loads: NotRequired[dict[str, dict[str, object]]]
    schedule: NotRequired[ScheduleReport]


@dataclass(frozen=True)
class ComparisonInputs:
    """Everything the build needs from the database, as plain data a child process takes."""

    series: Sequence[SeriesData]
    equivalence_runs: dict[str, list[EquivalenceCheck]]
    # The SLO as the experiment's load settings keep it (``Slo.from_dict`` reads it).
    slo: Mapping[str, object] | None
    protocol: ProtocolRecord
    environment_differences: dict[str, list[str]]
    # What the arms are declared to differ in, and their acceptance-axis loads (axes).
    axes: ExperimentAxes
    # Each arm's series (its levels) and its profile's launch argv, for the schedule.
    schedule_arms: Sequence[tuple[SeriesData, list[str]]]
    # The running-batch readings per level the schedule's switches are placed from.
    observed: dict[int, dict[int, int]]


def comparison_inputs(*, experiment_id: int) -> ComparisonInputs:
    """The experiment's levels, output checks, SLO, protocol and environments (queries only)."""
    experiment = Experiment.objects.get(pk=experiment_id)
    arms = experiment_arm_series(experiment=experiment)
    declared = axes.experiment_axes(experiment=experiment)
    return ComparisonInputs(
        series=axes.series_judged(
            experiment_series(experiment=experiment), declared["declared_axis"]
        ),
        axes=declared,
        equivalence_runs=selectors.experiment_equivalence_runs(experiment=experiment),
        slo=(experiment.load or {}).get("slo"),
        protocol=experiment_protocol(experiment=experiment),
        environment_differences=experiment_environment_differences(experiment_id=experiment_id),
        schedule_arms=[(series, list(arm.profile.launch_argv)) for arm, series in arms],
        observed={
            level: dict(counts)
            for level, counts in running_batches(series=[series for _, series in arms]).items()
        },
    )


def comparison_from_inputs(inputs: ComparisonInputs) -> StoredComparison:
    """The comparison with its protocol, environment differences and schedule (no queries;
    each records file parsed once for all of them)."""
    with records_read_once():
        # How it was measured: the interval's scope, drift and order effect per level; a level
        # whose drift exceeds the margin is inconclusive in the decision.
        built = comparison.comparison_build(
            series=inputs.series,
            equivalence_runs=inputs.equivalence_runs,
            slo=inputs.slo,
            drift=protocol_drift(inputs.protocol),
        )
        result: StoredComparison = {
            **built,
            "protocol": inputs.protocol,
            # What else than their declared launch differs between the arms' runs.
            "environment_differences": inputs.environment_differences,
            "declared_axis": inputs.axes["declared_axis"],
            "arm_loads": inputs.axes["arm_loads"],
            # Built now with the comparison so that no GET derives it from the records.
            "schedule": schedule.schedule_build(inputs.schedule_arms, inputs.observed),
        }
    return result


def experiment_save_comparison(*, experiment_id: int, result: StoredComparison) -> None:
    Experiment.objects.filter(pk=experiment_id).update(comparison=result)


async def experiment_store_comparison_off_worker(*, experiment_id: int) -> StoredComparison:
    """``recording.experiment_store_comparison`` with the build in a child process, so no
    build length holds up the worker's other jobs, its event loop or its lease renewals."""
    inputs = await store.acomparison_inputs(experiment_id=experiment_id)
    loop = asyncio.get_running_loop()
    context = multiprocessing.get_context("spawn")
    # A fresh interpreter (spawn: no copy of the worker's threads, locks or connections) that
    # sets Django up before this module is imported there (the app registry is needed for the
    # modules' imports, never the database).
    pool = ProcessPoolExecutor(max_workers=1, mp_context=context, initializer=django.setup)
    try:
        result = await loop.run_in_executor(pool, comparison_from_inputs, inputs)
    finally:
        # Never wait here: a worker shutting down mid-build must not block its event loop
        # (the child, which holds no database connection or lease, ends with its build).
        pool.shutdown(wait=False, cancel_futures=True)
    await store.aexperiment_save_comparison(experiment_id=experiment_id, result=result)
    return result
