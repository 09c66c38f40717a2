"""Build the comparison of two or more profiles from their sweeps (no ORM here: the inputs
come from benchmarks.experiments.series, the statistics from benchlib.stats).

The compared metric is each level's output tokens per second over the whole level (the
load generator's ``output_tok_s``); the steady-window figure and the latencies are shown
next to it. Only completed levels count (``level_runs``). Per level:

* with two or more repeats on both sides, the ratio's interval comes from the repeats
  (``LevelSample.from_repeats``);
* with one sweep per side, from batch means over time windows of that level's requests, read
  from the sweep's records file (``LevelSample`` with ``requests``);
* otherwise there is a point ratio and no interval.

Each series' level rows are built by ``level_rows``, each verdict's stored shape by
``verdicts``; this module compares: the verdicts, the decisions, the goodput verdicts under
an SLO and the table. The result (``Comparison``) is stored on a finished experiment and
rendered by the comparison page, the CSV and the HTML report alike.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NotRequired, TypedDict

from benchlib.json_types import JsonObject
from benchlib.loadgen.goodput import Slo
from benchlib.stats.saturation import find_saturation
from benchlib.stats.verdict import compare_all
from benchmarks.experiments import workload
from benchmarks.experiments.candidate_decision import (
    CONFIDENCE,
    candidate_decision,
    latency_ratios,
)
from benchmarks.experiments.decisions import RATE_FIGURE, is_rate_mode
from benchmarks.experiments.equivalence import (
    EquivalenceCheck,
    EquivalenceSummary,
    equivalence_summary,
)
from benchmarks.experiments.goodput_verdicts import goodput_verdicts
from benchmarks.experiments.level_rows import LevelRow, series_rows
from benchmarks.experiments.level_runs import (
    METRIC,
    IntervalSource,
    SeriesCurve,
    SeriesData,
    curve_with_sources,
)
from benchmarks.experiments.verdicts import (
    SaturationEntry,
    VerdictEntry,
    advice_fields,
    saturation_dict,
    verdict_entry,
    vllm_config,
)
from benchmarks.sweeps.recordfile import records_read_once

if TYPE_CHECKING:
    from benchmarks.experiments.series import EnvironmentSummary

logger = logging.getLogger(__name__)

COMPARISON_VERSION = 1


class SeriesEntry(TypedDict):
    """One series as the comparison shows it: its level rows and where its curve saturates."""

    label: str
    name: str
    speculative: bool
    profile_id: int | None
    sweep_ids: list[int]
    levels: list[LevelRow]
    interval_sources: dict[str, IntervalSource]
    environment: list[EnvironmentSummary]
    saturation: SaturationEntry | None
    slo_max_concurrency: int | None


class RatioCell(TypedDict):
    """A table cell: the decision's level (its oriented ratio, status and sentence); only the
    sides where the decision has no such level."""

    candidate: str
    reference: str
    concurrency: NotRequired[int]
    point: NotRequired[float]
    low: NotRequired[float | None]
    high: NotRequired[float | None]
    method: NotRequired[str]
    refused: NotRequired[str]
    status: NotRequired[str]
    sentence: NotRequired[str]


class TableRow(TypedDict):
    """One concurrency across the series: each series' level row as a cell (labelled; only
    ``runs: 0`` where that series has no such level) and the decided ratios."""

    concurrency: int
    cells: list[LevelRow]
    ratios: list[RatioCell]
    goodput_ratios: list[RatioCell]


class Comparison(TypedDict):
    """What ``comparison_build`` returns (the experiment stores it with more beside)."""

    version: int
    metric: str
    confidence: float
    reference: str | None
    series: list[SeriesEntry]
    verdicts: list[VerdictEntry]
    rows: list[TableRow]
    slo: JsonObject | None
    goodput_verdicts: list[VerdictEntry]
    equivalence: EquivalenceSummary | None
    warnings: list[str]
    built_at: str


def _decided_ratio(verdict: VerdictEntry, concurrency: int) -> RatioCell:
    """A table cell: the decision's level (its oriented ratio, status and sentence)."""
    cell: RatioCell = {"candidate": verdict["candidate"], "reference": verdict["reference"]}
    levels = (verdict.get("decision") or {}).get("levels") or []
    # Decision.to_dict writes its levels as a list of dicts.
    assert isinstance(levels, list)
    level = next((lv for lv in levels if lv["concurrency"] == concurrency), None)
    if level is not None:
        ratio = level["ratio"]
        cell.update(
            {
                "concurrency": concurrency,
                "point": ratio["point"],
                "low": ratio["low"],
                "high": ratio["high"],
                "method": ratio["method"],
                "refused": ratio["refused"],
                "status": level["status"],
                "sentence": level["sentence"],
            }
        )
    return cell


def _table(
    series: Sequence[SeriesEntry],
    verdicts: Sequence[VerdictEntry],
    goodput_verdicts: Sequence[VerdictEntry] = (),
) -> list[TableRow]:
    concurrencies = sorted({row["concurrency"] for s in series for row in s["levels"]})
    rows: list[TableRow] = []
    for c in concurrencies:
        cells = []
        for s in series:
            row = next((r for r in s["levels"] if r["concurrency"] == c), None)
            cells.append({"label": s["label"], **(row or {"runs": 0})})
        ratios = [_decided_ratio(v, c) for v in verdicts]
        goodput_ratios = [_decided_ratio(v, c) for v in goodput_verdicts]
        rows.append(
            {"concurrency": c, "cells": cells, "ratios": ratios, "goodput_ratios": goodput_ratios}
        )
    return rows


def comparison_build(
    *,
    series: Sequence[SeriesData],
    equivalence_runs: Mapping[str, list[EquivalenceCheck]] | None = None,
    slo: Mapping[str, object] | None = None,
    drift: Mapping[str, Mapping[int, float]] | None = None,
) -> Comparison:
    """The comparison of ``series`` (``_comparison_build``), each records file parsed once
    however many levels, curves and verdicts read it.

    The experiment's build adds its protocol, axes and schedule to it before storing it
    (``builds.StoredComparison``), and every surface reads it back from that JSON field."""
    with records_read_once():
        return _comparison_build(
            series=series,
            equivalence_runs=equivalence_runs,
            slo=slo,
            drift=drift,
        )


def _comparison_build(
    *,
    series: Sequence[SeriesData],
    equivalence_runs: Mapping[str, list[EquivalenceCheck]] | None,
    slo: Mapping[str, object] | None,
    drift: Mapping[str, Mapping[int, float]] | None,
) -> Comparison:
    """The comparison of ``series`` against the first one that has data (see module notes).

    ``drift`` (candidate label -> C -> the largest drift of an arm's own runs, from an
    experiment's protocol record) holds the levels whose drift exceeds the margin inconclusive.

    With an ``slo`` (the experiment's load settings), each series gets the highest concurrency
    meeting it and each candidate a goodput verdict beside the throughput one."""
    warnings: list[str] = []
    built: list[SeriesCurve] = []
    out_series: list[SeriesEntry] = []
    for s in series:
        curve, sources = curve_with_sources(s)
        levels = series_rows(s.runs)
        entry: SeriesEntry = {
            "label": s.label,
            "name": s.name,
            "speculative": s.speculative,
            "profile_id": s.profile_id,
            "sweep_ids": list(s.sweep_ids),
            "levels": levels,
            "interval_sources": {str(c): src for c, src in sources.items()},
            "environment": s.environment,
            "saturation": None,
            "slo_max_concurrency": workload.slo_max_concurrency(levels),
        }
        if curve.levels:
            entry["saturation"] = saturation_dict(find_saturation(curve))
            built.append((s, curve, sources))
        else:
            warnings.append(f"{s.label} ({s.name}) has no completed level: left out of the ratios.")
        out_series.append(entry)
    verdicts: list[VerdictEntry] = []
    reference_label = built[0][0].label if built else None
    rate_mode = any(is_rate_mode(data.runs) for data, _, _ in built)
    if len(built) >= 2:
        labels = {curve.name: data.label for data, curve, _ in built}
        ref_curve = built[0][1]
        all_verdicts = compare_all(
            ref_curve,
            [curve for _, curve, _ in built[1:]],
            confidence=CONFIDENCE,
        )
        for (cand_data, _, _), verdict in zip(built[1:], all_verdicts, strict=True):
            verdict_out = verdict_entry(verdict, labels)
            if rate_mode:
                ratios = latency_ratios(built[0][0], cand_data)
                decision = candidate_decision(
                    built[0][0], cand_data, ratios, RATE_FIGURE, True, drift
                )
            else:
                decision = candidate_decision(
                    built[0][0], cand_data, verdict.ratios, METRIC, False, drift
                )
            advice_fields(decision, verdict_out)
            verdict_out["vllm_speculative_config"] = vllm_config(verdict_out, built)
            verdicts.append(verdict_out)
            for lr in verdict.ratios.levels:
                if lr.ratio.refused:
                    warnings.append(
                        f"{labels[verdict.candidate]}/{labels[verdict.reference]} at "
                        f"C={lr.concurrency}: interval not shown: {lr.ratio.refused}."
                    )
            if verdict.ratios.unmatched:
                warnings.append(
                    f"{labels[verdict.candidate]} and {labels[verdict.reference]}: levels "
                    f"tested by only one side: {', '.join(map(str, verdict.ratios.unmatched))}."
                )
    else:
        warnings.append("Fewer than two profiles have completed levels: no ratio to compute.")
    parsed_slo = Slo.from_dict(slo)
    under_slo: list[VerdictEntry] = []
    if parsed_slo is not None and len(built) >= 2:
        reach = {e["label"]: e["slo_max_concurrency"] for e in out_series}
        under_slo = goodput_verdicts(built, reach, parsed_slo, rate_mode=rate_mode)
    equivalence = (
        equivalence_summary(reference=reference_label or series[0].label, runs=equivalence_runs)
        if equivalence_runs and series
        else None
    )
    return {
        "version": COMPARISON_VERSION,
        "metric": METRIC,
        "confidence": CONFIDENCE,
        "reference": reference_label,
        "series": out_series,
        "verdicts": verdicts,
        "rows": _table(out_series, verdicts, under_slo),
        "slo": parsed_slo.to_dict() if parsed_slo is not None else None,
        "goodput_verdicts": under_slo,
        "equivalence": equivalence,
        "warnings": warnings,
        "built_at": datetime.now(tz=UTC).isoformat(),
    }
