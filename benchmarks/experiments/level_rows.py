"""A series' level rows as the comparison's table shows them: per concurrency, the figures
averaged over its repeats, the requests, acceptance, goodput and phase figures, and the
level's health as the decision reads it.

Apart from the comparison (comparison.py), which compares the series: a row only describes
one series at one level, from its runs alone, and is the same whatever it is compared with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypedDict

from benchmarks.experiments import workload
from benchmarks.experiments.decisions import arm_health, is_rate_mode
from benchmarks.experiments.level_runs import (
    METRIC,
    LevelRun,
    by_concurrency,
    mean_present,
)
from benchmarks.phases import phases_row
from benchmarks.sweeps.health import RequestCounts, health_of
from benchmarks.sweeps.level_figures import LEVEL_FIGURES


class LevelHealthRow(TypedDict):
    """A level's health over its runs (``health_row``)."""

    asked: int
    achieved: float | None
    reached: bool
    requests: int
    failed: int
    cancelled: int
    client_limited: bool
    warnings: list[str]


# A level row: the keys below plus LEVEL_FIGURES' (each a mean over repeats), the requests
# (workload.RequestsRow), acceptance (workload.acceptance_row, whose shape is not declared),
# goodput (workload.GoodputRow) and phase (phases.PhasesRow) figures. Its type is that of
# its undeclared acceptance part until acceptance_row declares its own.
LevelRow = dict[str, Any]


def series_rows(runs: Sequence[LevelRun]) -> list[LevelRow]:
    rows = []
    for concurrency, level_runs in by_concurrency(runs).items():
        row: LevelRow = {"concurrency": concurrency, "runs": len(level_runs)}
        for name in LEVEL_FIGURES:
            row[name] = mean_present([r.figures.get(name) for r in level_runs])
        row["values"] = [r.figures.get(METRIC) for r in level_runs]
        row.update(workload.requests_row(level_runs))
        row.update(workload.acceptance_row(level_runs))
        row.update(workload.goodput_row(level_runs))
        # Only the phases the level ran: a plain level's row is as it was before they were kept
        # (so an older stored comparison still audits clean).
        phases = phases_row([r.summary for r in level_runs])
        row.update({name: value for name, value in phases.items() if value})
        row["health"] = health_row(concurrency, level_runs)
        rows.append(row)
    return rows


def health_row(concurrency: int, runs: Sequence[LevelRun]) -> LevelHealthRow:
    """The level's health over its runs, as the decision reads it (``arm_health``): the
    lowest achieved C beside the asked one, failed and cancelled counts, the warnings."""
    arm = arm_health(runs)
    health = health_of(
        concurrency=concurrency,
        achieved=arm.achieved_concurrency,
        counts=RequestCounts(arm.requests, arm.failed, arm.cancelled),
        client_limited=arm.client_limited,
        client_warning=arm.client_warning,
        rate_mode=is_rate_mode(runs),
        starved=arm.load_source_starved,
        starved_reason=arm.starved_reason,
    )
    return {
        "asked": health.asked,
        "achieved": health.achieved,
        "reached": health.reached,
        "requests": arm.requests,
        "failed": arm.failed,
        "cancelled": arm.cancelled,
        "client_limited": health.client_limited,
        "warnings": list(health.warnings),
    }
