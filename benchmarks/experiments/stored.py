"""What a page, report, CSV or API answer shows of a comparison: read, never rebuilt per GET.

A finished experiment's comparison and schedule are built once when it ends (or resumes and
ends again) and kept on the experiment (``recording.experiment_store_comparison``); a GET
reads them. What has no stored row (the compare-sweeps page, a running experiment's so-far
comparison) is kept in the cache under a hash of its content: the levels' figures and
summaries, the records files' sizes and modification times, the SLO and the build's
parameters. A new level, a resume or a rewritten records file changes the hash, so the next
GET builds again, once; every other GET reads. The audit (which rebuilds the comparison from
the records by design) is not run by a GET: a page shows the stored outcome, or none.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django.core.cache import cache
from django.db import transaction

from benchlib.json_types import JsonObject
from benchmarks.experiments import axes, comparison, selectors
from benchmarks.experiments import schedule as speculation_schedule
from benchmarks.experiments.level_runs import SeriesData
from benchmarks.experiments.models import Experiment
from benchmarks.experiments.schedule import ScheduleReport
from benchmarks.experiments.series import (
    experiment_arm_series,
    experiment_series,
    running_batches,
    sweep_series,
)
from benchmarks.sweeps.models import Sweep

if TYPE_CHECKING:
    from benchmarks.experiments.builds import StoredComparison
    from benchmarks.experiments.comparison import Comparison
    from benchmarks.experiments.equivalence import EquivalenceCheck

# Bumped when what is cached changes shape, so an old entry is never read as a new one.
CACHE_VERSION = 1


def _file_state(path: str) -> tuple[int, int] | None:
    if not path:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def series_fingerprint(series: Sequence[SeriesData]) -> list[Any]:
    """Everything a comparison of ``series`` is computed from, as plain JSON-able data: every
    field of every series and run (a field added later counts without being listed here),
    and the state of each run's records file."""
    return [
        [
            dataclasses.asdict(s),
            [_file_state(run.records_path) for run in s.runs],
        ]
        for s in series
    ]


def content_key(kind: str, content: Any) -> str:
    """The cache key of a result of ``kind`` built from ``content`` (its SHA-256)."""
    text = json.dumps([CACHE_VERSION, kind, content], sort_keys=True, default=str)
    return f"specdash:{kind}:{hashlib.sha256(text.encode()).hexdigest()}"


_Built = TypeVar("_Built")


def _cached(key: str, build: Callable[[], _Built]) -> _Built:
    found: _Built | None = cache.get(key)
    if found is None:
        found = build()
        # No expiry: the key changes with the content, and the cache's own size limit evicts.
        cache.set(key, found, timeout=None)
    # A shallow copy (as ``dict(found)``), so that a caller adding keys leaves the cached one.
    return copy.copy(found)


def comparison_cached(
    *,
    series: Sequence[SeriesData],
    slo: Mapping[str, object] | None,
    equivalence_runs: Mapping[str, list[EquivalenceCheck]] | None = None,
) -> Comparison:
    """``comparison.comparison_build`` of ``series``, built once per content."""
    runs = dict(equivalence_runs) if equivalence_runs is not None else None
    key = content_key("comparison", [series_fingerprint(series), slo, runs])
    return _cached(
        key,
        lambda: comparison.comparison_build(series=series, slo=slo, equivalence_runs=runs),
    )


def experiment_comparison(*, experiment: Experiment) -> StoredComparison:
    """A finished experiment's stored comparison; a running one's so far, built once per
    completed level."""
    if experiment.is_finished and experiment.comparison:
        # Stored as ``builds.comparison_from_inputs`` returned it.
        return cast("StoredComparison", dict(experiment.comparison))
    declared = axes.experiment_axes(experiment=experiment)
    built = comparison_cached(
        series=axes.series_judged(
            experiment_series(experiment=experiment), declared["declared_axis"]
        ),
        slo=(experiment.load or {}).get("slo"),
        equivalence_runs=selectors.experiment_equivalence_runs(experiment=experiment),
    )
    # Only the axes beside a running experiment's comparison (no protocol, environment
    # differences or schedule yet): mypy refuses a ``**`` item that might hold those keys.
    return cast("StoredComparison", {**built, **declared})


def experiment_schedule_report(*, experiment: Experiment) -> ScheduleReport:
    """The schedule kept with a finished experiment's comparison. One that ended before
    schedules were kept gets it built now and stored, once; a running one's is built once
    per completed level."""
    stored = experiment.comparison or {}
    if experiment.is_finished and isinstance(stored.get("schedule"), dict):
        # Stored as ``schedule_build`` returned it.
        return cast(ScheduleReport, dict(stored["schedule"]))
    if experiment.is_finished and stored:
        built = speculation_schedule.experiment_schedule(experiment=experiment)
        experiment_store_schedule(experiment_id=experiment.pk, schedule=built)
        return built
    arms = experiment_arm_series(experiment=experiment)
    observed = running_batches(series=[series for _, series in arms])
    content = [
        series_fingerprint([series for _, series in arms]),
        [list(arm.profile.launch_argv) for arm, _ in arms],
        sorted((level, sorted(counts.items())) for level, counts in observed.items()),
    ]
    return _cached(
        content_key("schedule", content),
        lambda: speculation_schedule.schedule_build(
            [(series, list(arm.profile.launch_argv)) for arm, series in arms], observed
        ),
    )


def experiment_store_schedule(*, experiment_id: int, schedule: ScheduleReport) -> None:
    """Keep ``schedule`` in the experiment's stored comparison (a row lock: the end of run
    may write the comparison at the same moment)."""
    with transaction.atomic():
        row = Experiment.objects.select_for_update().filter(pk=experiment_id).first()
        if row is None or not row.comparison:
            return
        Experiment.objects.filter(pk=experiment_id).update(
            comparison={**row.comparison, "schedule": schedule}
        )


def sweeps_comparison(*, sweeps: Sequence[Sweep]) -> Comparison:
    """Picked sweeps compared against the first (judged by its SLO), built once per content."""
    slo = (sweeps[0].load or {}).get("slo") if sweeps else None
    return comparison_cached(series=sweep_series(sweeps=sweeps), slo=slo)


# The API's handlers (specdash.api.experiments) declare a plain dict, their response schemas
# describing its shape: these hand them the reads above as such.


def experiment_comparison_read(*, experiment: Experiment) -> JsonObject:
    return dict(experiment_comparison(experiment=experiment))


def experiment_schedule_read(*, experiment: Experiment) -> JsonObject:
    return dict(experiment_schedule_report(experiment=experiment))


def sweeps_comparison_read(*, sweeps: Sequence[Sweep]) -> JsonObject:
    return dict(sweeps_comparison(sweeps=sweeps))
