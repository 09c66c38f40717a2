"""A comparison's inputs as the statistics read them: each series' completed levels
(``LevelRun``), grouped by concurrency, and the throughput curve built from them.

Apart from the comparison (comparison.py) because every figure computed from a series reads
its levels through here: the comparison's ratios and table, the speculation schedule, tuning
and break-even maps. One grouping and one curve, so they all compare the same levels.

The compared metric is each level's output tokens per second over the whole level (the load
generator's ``output_tok_s``). Only completed levels with a positive figure count: a partial
level (cancel, crash) measured less load than it claims. A level's curve point gets its
interval from the repeats (two or more runs), else from batch means over the requests of its
one run (read from the sweep's records file), else it is a point with no interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from benchlib.json_types import JsonObject
from benchlib.stats.types import Curve, LevelSample, RequestPoint
from benchmarks.experiments.records import read_request_points

if TYPE_CHECKING:
    from benchmarks.experiments.series import EnvironmentSummary

# The ratio compares this figure only; the table and charts average every one of the level's
# headline figures over its repeats (``benchmarks.sweeps.level_figures.LEVEL_FIGURES``).
METRIC = "output_tok_s"

# Where a level's interval comes from (``level_sample``).
IntervalSource = Literal["repeats", "requests", "single"]


@dataclass(frozen=True)
class LevelRun:
    """One completed level of one sweep."""

    sweep_id: int
    index: int
    concurrency: int
    figures: dict[str, float | None]
    records_path: str = ""
    # The sweep attempt that measured this level: its records carry the same number.
    attempt: int = 1
    # The level's summary (acceptance, goodput) and its server-side figures (server_metrics),
    # both as the load generator and the telemetry stored them.
    summary: Mapping[str, Any] = field(default_factory=dict)
    server: JsonObject = field(default_factory=dict)
    # The sweep's workload settings as one string (``decisions.workload_fingerprint``).
    workload: str = ""


@dataclass(frozen=True)
class SeriesData:
    """One profile (an experiment's arm, or one picked sweep) and its completed levels."""

    label: str
    name: str
    speculative: bool
    profile_id: int | None
    sweep_ids: tuple[int, ...]
    runs: tuple[LevelRun, ...]
    # Each sweep's environment as series.py summarises it (engine, launch argv, GPUs, ...).
    environment: list[EnvironmentSummary] = field(default_factory=list)
    engine: str = ""  # the profile's engine key


# A series with the curve built from it and where each level's interval comes from.
SeriesCurve = tuple[SeriesData, Curve, dict[int, IntervalSource]]


def mean_present(values: Sequence[float | None]) -> float | None:
    """The mean of the finite values given; None when there are none."""
    present = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.fmean(present) if present else None


def by_concurrency(runs: Sequence[LevelRun]) -> dict[int, list[LevelRun]]:
    """The runs with a positive METRIC, grouped by concurrency (ascending)."""
    grouped: dict[int, list[LevelRun]] = {}
    for run in runs:
        value = run.figures.get(METRIC)
        if value is None or value <= 0:
            continue
        grouped.setdefault(run.concurrency, []).append(run)
    return dict(sorted(grouped.items()))


def requests_for(run: LevelRun) -> Sequence[RequestPoint]:
    """The run's measured, successful requests (each with a positive duration: a request
    ending at its start is left out as it is read)."""
    if not run.records_path:
        return []
    return read_request_points(Path(run.records_path), run.index, run.attempt)


def level_sample(concurrency: int, runs: Sequence[LevelRun]) -> tuple[LevelSample, IntervalSource]:
    values = [float(r.figures[METRIC] or 0.0) for r in runs]
    if len(runs) >= 2:
        return LevelSample.from_repeats(concurrency, values), "repeats"
    points = requests_for(runs[0])
    if len(points) >= 2:
        # The level's own figure stays the headline; the requests feed the batch means.
        return LevelSample(concurrency, values[0], requests=points), "requests"
    return LevelSample(concurrency, values[0]), "single"


def curve_with_sources(series: SeriesData) -> tuple[Curve, dict[int, IntervalSource]]:
    """The series' throughput curve, and where each level's interval comes from."""
    levels, sources = [], {}
    for concurrency, level_runs in by_concurrency(series.runs).items():
        sample, source = level_sample(concurrency, level_runs)
        levels.append(sample)
        sources[concurrency] = source
    curve = Curve(series.name, levels, speculative=series.speculative, engine=series.engine)
    return curve, sources


def series_curve(series: SeriesData) -> Curve:
    """The series' throughput curve as the comparison builds it (repeats, else requests)."""
    return curve_with_sources(series)[0]
