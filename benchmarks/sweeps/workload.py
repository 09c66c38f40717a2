"""The sweep page's workload blocks, from the level summaries already read (no query): goodput
under the sweep's SLOs, acceptance per prompt category, and the levels' phases."""

from __future__ import annotations

from typing import Any, TypedDict

from benchlib.json_types import JsonObject
from benchlib.loadgen.settings import stored_workload
from benchmarks.phases import PhaseBlocks
from benchmarks.sweeps.models import Sweep, SweepLevel
from benchmarks.sweeps.selectors import sweep_phases


def figure_at(data: Any, *path: str) -> Any:
    """The value at ``path`` in nested JSON objects (a stored summary), None where a key or an
    object along it is missing."""
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


class WorkloadGoodputRow(TypedDict):
    """A level's goodput under the sweep's SLOs (its summary's ``goodput``)."""

    index: int
    label: str
    share: float | None
    met: int | None
    requests: int | None
    goodput_req_s: float | None
    goodput_tok_s: float | None
    meets_slo: bool


class WorkloadAcceptanceRow(TypedDict):
    """A level's acceptance, overall and per prompt category (``cells``, in ``categories``'
    order, each the summary's category figures plus its ``name``)."""

    index: int
    label: str
    accept_length: float | None
    acceptance_rate: float | None
    cells: list[JsonObject]


class SweepWorkload(PhaseBlocks):
    """``sweep_workload``: the sweep page's workload blocks."""

    slo: JsonObject | None  # the SLOs the sweep set, as stored
    goodput: list[WorkloadGoodputRow]
    categories: list[str]
    acceptance: list[WorkloadAcceptanceRow]
    description: str  # the workload in words


def sweep_workload(*, sweep: Sweep, levels: list[SweepLevel]) -> SweepWorkload:
    """Goodput and per-category acceptance per level, from the level summaries already read
    (no query): ``goodput`` rows when the sweep set SLOs, ``categories`` (names) and
    ``acceptance`` rows when the engine reported per-request acceptance for any level."""
    slo = (sweep.load or {}).get("slo")
    goodput: list[WorkloadGoodputRow] = []
    acceptance: list[WorkloadAcceptanceRow] = []
    names: set[str] = set()
    reported = False
    for level in levels:
        by_category = figure_at(level.summary, "acceptance", "by_category") or {}
        names.update(by_category)
        reported = reported or any(
            isinstance(c, dict)
            and (c.get("accept_length") is not None or c.get("acceptance_rate") is not None)
            for c in by_category.values()
        )
    # Only where the engine reported per-request acceptance (every summary has categories).
    categories = sorted(names) if reported else []
    for level in levels:
        label = getattr(level, "label", f"C={level.concurrency}")
        found = figure_at(level.summary, "goodput")
        if slo and isinstance(found, dict):
            goodput.append(
                {
                    "index": level.index,
                    "label": label,
                    "share": found.get("share"),
                    "met": found.get("met"),
                    "requests": found.get("requests"),
                    "goodput_req_s": found.get("goodput_req_s"),
                    "goodput_tok_s": found.get("goodput_tok_s"),
                    "meets_slo": bool(found.get("meets_slo")),
                }
            )
        by_category = figure_at(level.summary, "acceptance", "by_category") or {}
        if categories and by_category:
            acceptance.append(
                {
                    "index": level.index,
                    "label": label,
                    "accept_length": figure_at(level.summary, "acceptance", "accept_length"),
                    "acceptance_rate": figure_at(level.summary, "acceptance", "acceptance_rate"),
                    "cells": [{**(by_category.get(n) or {}), "name": n} for n in categories],
                }
            )
    return {
        "slo": slo,
        "goodput": goodput,
        "categories": categories,
        "acceptance": acceptance,
        "description": stored_workload(sweep.load),
        **sweep_phases(levels=levels),
    }
