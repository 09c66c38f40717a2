"""Build the comparison of two or more profiles from their sweeps (no ORM here: the inputs
come from benchmarks.experiments.selectors, the statistics from benchlib.stats).

The compared metric is each level's output tokens per second over the whole level (the
load generator's ``output_tok_s``); the steady-window figure and the latencies are shown
next to it. Only completed levels count: a partial level (cancel, crash) measured less
load than it claims. Per level:

* with two or more repeats on both sides, the ratio's interval comes from the repeats
  (``LevelSample.from_repeats``);
* with one sweep per side, from batch means over time windows of that level's requests, read
  from the sweep's records file (``LevelSample`` with ``requests``);
* otherwise there is a point ratio and no interval.

The result is a plain JSON-able dict, stored on a finished experiment and rendered by the
comparison page, the CSV and the HTML report alike.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchlib.loadgen.goodput import Slo
from benchlib.stats import (
    Crossing,
    Curve,
    LevelSample,
    Ratio,
    RatioCurve,
    RequestPoint,
    Saturation,
    Verdict,
    compare_all,
    find_saturation,
)
from benchlib.stats.decision import Arm, ArmHealth, Decision
from benchlib.stats.intervals import ratio_curve
from benchlib.stats.speculative_schedule import vllm_speculative_config
from benchmarks.experiments import workload
from benchmarks.experiments.decisions import (
    RATE_FIGURE,
    arm_health,
    decision_from,
    is_rate_mode,
    latency_curve,
    tpot_statistic,
)
from benchmarks.experiments.equivalence import equivalence_summary
from benchmarks.experiments.records import read_request_points as read_request_points
from benchmarks.experiments.records import request_points as request_points
from benchmarks.phases import phases_row
from benchmarks.sweeps.health import RequestCounts, health_of
from benchmarks.sweeps.recordfile import records_read_once

logger = logging.getLogger(__name__)

COMPARISON_VERSION = 1
METRIC = "output_tok_s"
CONFIDENCE = 0.95
N_BOOT = 1000
# Figures averaged over repeats for the table and charts (the ratio uses METRIC only).
SHOWN_FIGURES = (
    "output_tok_s",
    "steady_output_tok_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
    "itl_p50_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "achieved_concurrency",
)


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
    # The level's summary (acceptance, goodput) and its server-side figures (server_metrics).
    summary: Mapping[str, Any] = field(default_factory=dict)
    server: dict[str, Any] = field(default_factory=dict)
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
    environment: list[dict[str, Any]] = field(default_factory=list)
    engine: str = ""  # the profile's engine key


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.fmean(present) if present else None


def _by_concurrency(runs: Sequence[LevelRun]) -> dict[int, list[LevelRun]]:
    grouped: dict[int, list[LevelRun]] = {}
    for run in runs:
        value = run.figures.get(METRIC)
        if value is None or value <= 0:
            continue
        grouped.setdefault(run.concurrency, []).append(run)
    return dict(sorted(grouped.items()))


def _requests_for(run: LevelRun) -> Sequence[RequestPoint]:
    """The run's measured, successful requests (each with a positive duration: a request
    ending at its start is left out as it is read)."""
    if not run.records_path:
        return []
    return read_request_points(Path(run.records_path), run.index, run.attempt)


def _level_sample(concurrency: int, runs: Sequence[LevelRun]) -> tuple[LevelSample, str]:
    values = [float(r.figures[METRIC] or 0.0) for r in runs]
    if len(runs) >= 2:
        return LevelSample.from_repeats(concurrency, values), "repeats"
    points = _requests_for(runs[0])
    if len(points) >= 2:
        # The level's own figure stays the headline; the requests feed the bootstrap.
        return LevelSample(concurrency, values[0], requests=points), "requests"
    return LevelSample(concurrency, values[0]), "single"


def _series_rows(runs: Sequence[LevelRun]) -> list[dict[str, Any]]:
    rows = []
    for concurrency, level_runs in _by_concurrency(runs).items():
        row: dict[str, Any] = {"concurrency": concurrency, "runs": len(level_runs)}
        for name in SHOWN_FIGURES:
            row[name] = _mean([r.figures.get(name) for r in level_runs])
        row["values"] = [r.figures.get(METRIC) for r in level_runs]
        row.update(workload.requests_row(level_runs))
        row.update(workload.acceptance_row(level_runs))
        row.update(workload.goodput_row(level_runs))
        # Only the phases the level ran: a plain level's row is as it was before they were kept
        # (so an older stored comparison still audits clean).
        phases = phases_row([r.summary for r in level_runs])
        row.update({name: value for name, value in phases.items() if value})
        row["health"] = _health_row(concurrency, level_runs)
        rows.append(row)
    return rows


def _health_row(concurrency: int, runs: Sequence[LevelRun]) -> dict[str, Any]:
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


def _curve(series: SeriesData) -> tuple[Curve, dict[int, str]]:
    levels, sources = [], {}
    for concurrency, level_runs in _by_concurrency(series.runs).items():
        sample, source = _level_sample(concurrency, level_runs)
        levels.append(sample)
        sources[concurrency] = source
    curve = Curve(series.name, levels, speculative=series.speculative, engine=series.engine)
    return curve, sources


def series_curve(series: SeriesData) -> Curve:
    """The series' throughput curve as the comparison builds it (repeats, else requests)."""
    return _curve(series)[0]


def _ratio_dict(concurrency: int, ratio: Ratio) -> dict[str, Any]:
    return {
        "concurrency": concurrency,
        "point": ratio.point,
        "low": ratio.low,
        "high": ratio.high,
        "method": ratio.method,
        "sign": ratio.sign,
        "inconclusive": ratio.inconclusive,
        "refused": ratio.refused,
    }


def _crossing_dict(c: Crossing) -> dict[str, Any]:
    return {
        "concurrency": c.concurrency,
        "lower_level": c.lower_level,
        "upper_level": c.upper_level,
        "direction": c.direction,
        "has_interval": c.has_interval,
        "low": c.low,
        "high": c.high,
        "conclusive": c.conclusive,
    }


def saturation_dict(s: Saturation) -> dict[str, Any]:
    return {
        "saturated": s.saturated,
        "concurrency": s.concurrency,
        "throughput": s.throughput,
        "peak_concurrency": s.peak_concurrency,
        "last_gain_per_doubling": s.last_gain_per_doubling,
        "reason": s.reason,
    }


def _advice_fields(decision: Decision) -> dict[str, Any]:
    """The decision, and the verdict's advice fields read from it (not from the points), so
    that an API client reading ``disable_speculation_above`` gets the decision's answer:
    N for "on up to N, off above", 0 for "serve without", None otherwise; ``behind_from`` /
    ``ahead_from`` from its statuses."""
    actions = [band.action for band in decision.bands]
    above: int | None = None
    if actions == ["off"]:
        above = 0
    elif decision.engine_options:
        above = decision.bands[0].end
    out = decision.to_dict()
    settled = decision.behind_from if decision.behind_from is not None else decision.ahead_from
    return {
        "decision": out,
        "text": " ".join(decision.statements()),
        # Where the candidate is behind (ahead) at every level from there on, by the
        # decision's statuses on its deciding figure: never from the points alone.
        "behind_from": decision.behind_from,
        "ahead_from": decision.ahead_from,
        "settled_conclusively": settled is not None,
        "disable_speculation_above": above,
        "engine_options": out["engine_options"],
    }


def _vllm_config(
    verdict: dict[str, Any], built: list[tuple[SeriesData, Curve, dict[int, str]]]
) -> str | None:
    """The speculative profile's own --speculative-config with the switch added, when it is a
    vLLM profile: a value to paste, which vLLM validates at start-up (speculative_schedule)."""
    above = verdict.get("disable_speculation_above")
    if not above:
        return None
    for data, curve, _ in built:
        if curve.name != verdict["speculative_name"]:
            continue
        for env in data.environment:
            if env.get("engine") == "vllm":
                config = vllm_speculative_config(env.get("launch_argv") or [], int(above))
                if config is not None:
                    return config
    return None


def _verdict_dict(v: Verdict, labels: dict[str, str]) -> dict[str, Any]:
    last = v.crossover.last
    return {
        "reference": labels[v.reference],
        "candidate": labels[v.candidate],
        "reference_name": v.reference,
        "candidate_name": v.candidate,
        "ratios": [_ratio_dict(lr.concurrency, lr.ratio) for lr in v.ratios.levels],
        "unmatched": list(v.ratios.unmatched),
        "crossover": {
            "crossings": [_crossing_dict(c) for c in v.crossover.crossings],
            "last": _crossing_dict(last) if last is not None else None,
            "reason": v.crossover.reason,
            "inconclusive_levels": list(v.crossover.inconclusive_levels),
        },
        "reference_saturation": saturation_dict(v.reference_saturation),
        "candidate_saturation": saturation_dict(v.candidate_saturation),
        "saturation_ratio": v.saturation_ratio,
        "speculative": v.candidate_speculative or v.reference_speculative,
        "speculative_name": v.candidate if v.candidate_speculative else v.reference,
        "disable_speculation_above": v.disable_speculation_above,
        "engine_options": [
            {
                "engine": o.engine,
                "setting": o.setting,
                "value": o.value,
                "note": o.note,
                "source": o.source,
                "version": o.version,
            }
            for o in v.engine_options
        ],
    }


def _slo_phrase(slo: Slo) -> str:
    names = {
        "ttft_ms": "TTFT",
        "tpot_ms": "TPOT",
        "itl_ms": "mean ITL",
        "max_gap_ms": "longest gap",
        "e2e_ms": "E2E",
    }
    scope = " p99" if slo.scope == "p99" else ""
    limits = ", ".join(f"{names[k]}{scope} <= {v:g} ms" for k, v in slo.limits().items())
    if slo.scope == "request":
        limits += f" for {slo.attainment:.0%} of requests"
    return limits


def _reach(label: str, name: str, highest: int | None) -> str:
    where = "at no tested level" if highest is None else f"up to C={highest}"
    return f"{name} ({label}) meets them {where}"


def _goodput_verdicts(
    built: Sequence[tuple[SeriesData, Curve, dict[int, str]]],
    reach: dict[str, int | None],
    slo: Slo,
    *,
    n_boot: int,
    seed: int,
    rate_mode: bool,
) -> list[dict[str, Any]]:
    """The verdicts again, on goodput tok/s under the SLO instead of raw throughput, each
    opening with where each side meets the SLO."""
    curves = [
        workload.goodput_curve(curve.name, curve.speculative, _by_concurrency(data.runs), slo)
        for data, curve, _ in built
    ]
    labels = {curve.name: data.label for data, curve, _ in built}
    ref_data = built[0][0]
    out = []
    for (data, _, _), curve in zip(built[1:], curves[1:], strict=True):
        head = (
            f"Under the SLOs ({_slo_phrase(slo)}): "
            f"{_reach(ref_data.label, ref_data.name, reach[ref_data.label])}; "
            f"{_reach(data.label, data.name, reach[data.label])}."
        )
        if curves[0].levels and curve.levels:
            verdict = compare_all(
                curves[0], [curve], confidence=CONFIDENCE, n_boot=n_boot, seed=seed
            )[0]
            entry = _verdict_dict(verdict, labels)
            decision = _decision(built[0][0], data, verdict.ratios, "goodput_tok_s", rate_mode)
            entry.update(_advice_fields(decision))
            entry["text"] = " ".join((head, *decision.statements()))
        else:
            empty = data.name if not curve.levels else ref_data.name
            entry = {
                "reference": ref_data.label,
                "candidate": data.label,
                "reference_name": ref_data.name,
                "candidate_name": data.name,
                "ratios": [],
                "text": f"{head} {empty} delivers no goodput at any tested level.",
            }
        out.append(entry)
    return out


def _decided_ratio(verdict: dict[str, Any], concurrency: int) -> dict[str, Any]:
    """A table cell: the decision's level (its oriented ratio, status and sentence)."""
    cell: dict[str, Any] = {"candidate": verdict["candidate"], "reference": verdict["reference"]}
    levels = (verdict.get("decision") or {}).get("levels") or []
    level = next((lv for lv in levels if lv["concurrency"] == concurrency), None)
    if level is not None:
        ratio = level["ratio"]
        cell.update(
            concurrency=concurrency,
            point=ratio["point"],
            low=ratio["low"],
            high=ratio["high"],
            method=ratio["method"],
            refused=ratio["refused"],
            status=level["status"],
            sentence=level["sentence"],
        )
    return cell


_WHY_FIGURES = ("itl_p50_ms", "ttft_p50_ms")


def _grouped(series: SeriesData) -> dict[int, list[LevelRun]]:
    return _by_concurrency(series.runs)


def _decision(
    reference: SeriesData,
    candidate: SeriesData,
    ratios: RatioCurve,
    figure: str,
    rate_mode: bool,
    drift: Mapping[str, Mapping[int, float]] | None = None,
) -> Decision:
    ref_runs, cand_runs = _grouped(reference), _grouped(candidate)
    health: dict[int, tuple[ArmHealth, ArmHealth]] = {}
    runs: dict[int, int] = {}
    latency: dict[int, tuple[dict[str, float | None], dict[str, float | None]]] = {}
    for lr in ratios.levels:
        a, b = ref_runs.get(lr.concurrency, []), cand_runs.get(lr.concurrency, [])
        health[lr.concurrency] = (arm_health(a), arm_health(b))
        runs[lr.concurrency] = max(min(len(a), len(b)), 1)
        # The runs' mean medians, as the level rows show them: what the "why" line reads.
        latency[lr.concurrency] = (
            {key: _mean([r.figures.get(key) for r in a]) for key in _WHY_FIGURES},
            {key: _mean([r.figures.get(key) for r in b]) for key in _WHY_FIGURES},
        )
    return decision_from(
        reference=_arm(reference),
        candidate=_arm(candidate),
        ratios=ratios,
        health=health,
        figure=figure,
        rate_mode=rate_mode,
        runs_per_arm=runs,
        confidence=CONFIDENCE,
        drift=(drift or {}).get(candidate.label),
        latency=latency,
    )


def _arm(series: SeriesData) -> Arm:
    return Arm(series.name, series.label, series.speculative, series.engine)


def _latency_ratios(
    reference: SeriesData, candidate: SeriesData, *, n_boot: int, seed: int
) -> RatioCurve:
    """B/A of TPOT p50 per level (the figure that decides at a fixed request rate)."""
    curves = []
    for series in (reference, candidate):
        grouped = _grouped(series)
        requests = {c: _requests_for(runs[0]) for c, runs in grouped.items() if len(runs) == 1}
        curves.append(latency_curve(series.name, grouped, requests))
    return ratio_curve(
        curves[0],
        curves[1],
        confidence=CONFIDENCE,
        n_boot=n_boot,
        seed=seed,
        statistic=tpot_statistic,
    )


def _table(
    series: Sequence[dict[str, Any]],
    verdicts: Sequence[dict[str, Any]],
    goodput_verdicts: Sequence[dict[str, Any]] = (),
) -> list[Any]:
    concurrencies = sorted({row["concurrency"] for s in series for row in s["levels"]})
    rows = []
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
    equivalence_runs: dict[str, list[dict[str, Any]]] | None = None,
    n_boot: int = N_BOOT,
    seed: int = 0,
    slo: dict[str, Any] | None = None,
    drift: Mapping[str, Mapping[int, float]] | None = None,
) -> dict[str, Any]:
    """The comparison of ``series`` (``_comparison_build``), each records file parsed once
    however many levels, curves and verdicts read it."""
    with records_read_once():
        return _comparison_build(
            series=series,
            equivalence_runs=equivalence_runs,
            n_boot=n_boot,
            seed=seed,
            slo=slo,
            drift=drift,
        )


def _comparison_build(
    *,
    series: Sequence[SeriesData],
    equivalence_runs: dict[str, list[dict[str, Any]]] | None,
    n_boot: int,
    seed: int,
    slo: dict[str, Any] | None,
    drift: Mapping[str, Mapping[int, float]] | None,
) -> dict[str, Any]:
    """The comparison of ``series`` against the first one that has data (see module notes).

    ``drift`` (candidate label -> C -> the largest drift of an arm's own runs, from an
    experiment's protocol record) holds the levels whose drift exceeds the margin inconclusive.

    With an ``slo`` (the experiment's load settings), each series gets the highest concurrency
    meeting it and each candidate a goodput verdict beside the throughput one."""
    warnings: list[str] = []
    built: list[tuple[SeriesData, Curve, dict[int, str]]] = []
    out_series: list[dict[str, Any]] = []
    for s in series:
        curve, sources = _curve(s)
        entry: dict[str, Any] = {
            "label": s.label,
            "name": s.name,
            "speculative": s.speculative,
            "profile_id": s.profile_id,
            "sweep_ids": list(s.sweep_ids),
            "levels": _series_rows(s.runs),
            "interval_sources": {str(c): src for c, src in sources.items()},
            "environment": s.environment,
            "saturation": None,
        }
        entry["slo_max_concurrency"] = workload.slo_max_concurrency(entry["levels"])
        if curve.levels:
            entry["saturation"] = saturation_dict(find_saturation(curve))
            built.append((s, curve, sources))
        else:
            warnings.append(f"{s.label} ({s.name}) has no completed level: left out of the ratios.")
        out_series.append(entry)
    verdicts: list[dict[str, Any]] = []
    reference_label = built[0][0].label if built else None
    rate_mode = any(is_rate_mode(data.runs) for data, _, _ in built)
    if len(built) >= 2:
        labels = {curve.name: data.label for data, curve, _ in built}
        ref_curve = built[0][1]
        all_verdicts = compare_all(
            ref_curve,
            [curve for _, curve, _ in built[1:]],
            confidence=CONFIDENCE,
            n_boot=n_boot,
            seed=seed,
        )
        for (cand_data, _, _), verdict in zip(built[1:], all_verdicts, strict=True):
            entry = _verdict_dict(verdict, labels)
            if rate_mode:
                ratios = _latency_ratios(built[0][0], cand_data, n_boot=n_boot, seed=seed)
                decision = _decision(built[0][0], cand_data, ratios, RATE_FIGURE, True, drift)
            else:
                decision = _decision(built[0][0], cand_data, verdict.ratios, METRIC, False, drift)
            entry.update(_advice_fields(decision))
            entry["vllm_speculative_config"] = _vllm_config(entry, built)
            verdicts.append(entry)
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
    goodput_verdicts: list[dict[str, Any]] = []
    if parsed_slo is not None and len(built) >= 2:
        reach = {e["label"]: e["slo_max_concurrency"] for e in out_series}
        goodput_verdicts = _goodput_verdicts(
            built, reach, parsed_slo, n_boot=n_boot, seed=seed, rate_mode=rate_mode
        )
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
        "rows": _table(out_series, verdicts, goodput_verdicts),
        "slo": parsed_slo.to_dict() if parsed_slo is not None else None,
        "goodput_verdicts": goodput_verdicts,
        "equivalence": equivalence,
        "warnings": warnings,
        "built_at": datetime.now(tz=UTC).isoformat(),
    }
