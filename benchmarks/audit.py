"""The audit: every stored figure recomputed from the raw records and compared.

For a sweep: each level row's summary is recomputed by the load generator's own
``summarize_level`` from that level attempt's records (benchmarks.sweeps.recordfile) and
compared with the stored summary and its headline columns (counts, tokens, tok/s,
percentiles, steady window, per-request acceptance) and, under the sweep's SLO, its goodput
(share, req/s, tok/s, verdict); its server figures are recomputed from the level's kept
boundary /metrics scrapes (benchmarks.sweeps.scrapes) where they were kept; records that belong
to no level attempt, and lines that are not records, are reported. For an
experiment: its sweeps, then its stored comparison against one rebuilt from the same levels
and records, field by field (cells, ratios, intervals, goodput ratios, verdicts, decisions and
their statements), and the one-truth rule (every ratio point is the ratio of the figures in its
row; every interval contains its point).

Run at the end of a sweep and of an experiment and by ``manage.py specdash audit`` (outcome kept
on the row, ``*_store``, which the pages show without rerunning it) and by ``GET /api/v1/audit``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.utils import timezone

from benchlib.loadgen.goodput import Slo
from benchlib.loadgen.metrics import summarize_level
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchmarks.experiments import builds
from benchmarks.experiments import comparison as comparisons
from benchmarks.experiments.series import LEVEL_FIGURES
from benchmarks.models import Experiment, LevelState, Sweep, SweepLevel
from benchmarks.services import level_fields_from_summary
from benchmarks.sweeps.recordfile import (
    RecordGroups,
    read_record_file_once,
    records_read_once,
)
from benchmarks.sweeps.recording import undrafted_steps
from benchmarks.sweeps.scrapes import scrapes_path, scrapes_read
from hosts.telemetry.levels import level_server_metrics
from hosts.telemetry.prometheus import MetricsParseError, parse_engine_metrics

# Records keep times to 1 us, so recomputed durations and rates agree to about 1e-6; a
# record lost, duplicated or altered moves a figure by far more than these.
REL_TOL = 1e-4
ABS_TOL_MS = 0.01
DISTRIBUTIONS = ("ttft_ms", "tpot_ms", "itl_ms", "itl_chunk_ms", "itl_delivery_ms", "e2e_ms")
DIST_KEYS = ("count", "mean", "p50", "p90", "p99")
SCALARS = (
    "output_tokens",
    "prompt_tokens",
    "duration_s",
    "output_tok_s",
    "total_tok_s",
    "achieved_concurrency",
    "mean_tokens_per_chunk",
    "mean_tokens_per_delivery",
)
# The steady window's figures and the per-request speculative figures, nested in the summary.
NESTED = (
    ("steady", ("reached", "in_flight_level", "duration_s", "output_tokens", "output_tok_s")),
    ("acceptance", ("verify_steps", "draft_tokens", "accepted_tokens", "accept_length",
                    "acceptance_rate")),
)  # fmt: skip
GOODPUT = ("requests", "met", "share", "goodput_req_s", "goodput_tok_s", "meets_slo")
COLUMNS = (*LEVEL_FIGURES, "requests_ok", "requests_failed")
# The server figures recomputed from a level's kept boundary scrapes.
SERVER_FIGURES = (
    "duration_s",
    "prompt_tokens",
    "generation_tokens",
    "requests",
    "spec_drafts",
    "spec_draft_tokens",
    "spec_accepted_tokens",
    "accept_length",
    "acceptance_rate",
    "tokens_per_step",
    "accept_length_source",
    "tokens_per_step_source",
    "acceptance_rate_source",
)


@dataclass
class AuditReport:
    target: str
    problems: list[str] = field(default_factory=list)
    levels_checked: int = 0
    records_checked: int = 0
    comparisons_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def extend(self, other: AuditReport) -> None:
        self.problems += other.problems
        self.levels_checked += other.levels_checked
        self.records_checked += other.records_checked
        self.comparisons_checked += other.comparisons_checked

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "ok": self.ok,
            "problems": list(self.problems),
            "levels_checked": self.levels_checked,
            "records_checked": self.records_checked,
            "comparisons_checked": self.comparisons_checked,
        }


def _close(a: Any, b: Any, *, abs_tol: float = 0.0) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a == b)
    if isinstance(a, int | float) and isinstance(b, int | float):
        if not (math.isfinite(a) and math.isfinite(b)):
            return bool(a == b)
        return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=abs_tol)
    return bool(a == b)


def _differences(stored: Mapping[str, Any], fresh: Mapping[str, Any]) -> list[str]:
    out = []
    for key in ("total", "ok", "failed"):
        a, b = (stored.get("requests") or {}).get(key), (fresh.get("requests") or {}).get(key)
        if a != b:
            out.append(f"requests {key}: stored {a}, records give {b}")
    for key in SCALARS:
        if not _close(stored.get(key), fresh.get(key), abs_tol=1e-9):
            out.append(f"{key}: stored {stored.get(key)}, records give {fresh.get(key)}")
    for group, keys in NESTED:
        a_group, b_group = stored.get(group) or {}, fresh.get(group) or {}
        for key in keys:
            a, b = a_group.get(key), b_group.get(key)
            if not _close(a, b, abs_tol=1e-9):
                out.append(f"{group} {key}: stored {a}, records give {b}")
    for name in DISTRIBUTIONS:
        a_dist, b_dist = stored.get(name) or {}, fresh.get(name) or {}
        for key in DIST_KEYS:
            a, b = a_dist.get(key), b_dist.get(key)
            if not _close(a, b, abs_tol=ABS_TOL_MS):
                out.append(f"{name} {key}: stored {a}, records give {b}")
    return out + _goodput_differences(stored.get("goodput"), fresh.get("goodput"))


def _goodput_differences(stored: Any, fresh: Any) -> list[str]:
    """The stored goodput (requests meeting the SLO, share, req/s, tok/s, verdict) against the
    one recomputed from the records under the sweep's SLO."""
    if stored is None and fresh is None:
        return []
    if not isinstance(stored, dict):
        return ["goodput: none stored, though the sweep sets SLOs"]
    if not isinstance(fresh, dict):
        return ["goodput: stored, though the sweep sets no SLO"]
    out = []
    if stored.get("slo") != fresh.get("slo"):
        out.append(f"goodput slo: stored {stored.get('slo')}, the sweep's is {fresh.get('slo')}")
    for key in GOODPUT:
        if not _close(stored.get(key), fresh.get(key), abs_tol=1e-9):
            out.append(f"goodput {key}: stored {stored.get(key)}, records give {fresh.get(key)}")
    return out


def audit_level(
    level: SweepLevel, records: list[dict[str, Any]], *, slo: Slo | None = None
) -> list[str]:
    """Disagreements between one level row and the records of its attempt (``slo``: the
    sweep's, under which goodput is recomputed)."""
    where = f"level {level.index} (C={level.concurrency}, attempt {level.attempt})"
    measured = [r for r in records if not r.get("warmup")]
    problems = []
    summary = level.summary or {}
    if not summary:
        ok = sum(1 for r in measured if not r.get("error_kind"))
        if measured and ok != level.requests_ok:
            problems.append(f"{where}: {level.requests_ok} requests stored, {ok} in the records")
        return problems
    anchor_data = summary.get("anchor")
    if not isinstance(anchor_data, dict):
        return [f"{where}: the summary has no clock anchor to recompute it with"]
    try:
        anchor = ClockAnchor(float(anchor_data["t0_wall"]), float(anchor_data["t0_perf"]))
        parsed = [RequestRecord.from_json(r, anchor) for r in records]
    except (KeyError, TypeError, ValueError) as exc:
        return [f"{where}: a record cannot be read: {type(exc).__name__}: {exc}"]
    fresh = summarize_level(
        parsed,
        concurrency=int(summary.get("concurrency") or level.concurrency),
        mode=str(summary.get("mode") or "closed"),
        partial=bool(summary.get("partial")),
        anchor=anchor,
        slo=slo,
    )
    problems += [f"{where}: {d}" for d in _differences(summary, fresh)]
    columns = level_fields_from_summary(summary)
    for name in COLUMNS:
        if not _close(getattr(level, name), columns[name], abs_tol=1e-9):
            problems.append(
                f"{where}: column {name} is {getattr(level, name)}, its summary says "
                f"{columns[name]}"
            )
    return problems


def _known_attempts(level: SweepLevel) -> set[int]:
    earlier = {int(e.get("attempt") or 0) for e in level.earlier_attempts or []}
    return {level.attempt, *earlier}


def audit_sweep(*, sweep: Sweep) -> AuditReport:
    """One sweep's levels against its records, the records file read a level at a time (a
    level's rows are recomputed and dropped before the next level's are read), and against
    its kept server scrapes."""
    report = AuditReport(target=f"sweep #{sweep.pk}")
    try:
        slo = Slo.from_dict((sweep.load or {}).get("slo"))
    except ValueError as exc:
        report.problems.append(f"sweep #{sweep.pk}: its SLO cannot be read: {exc}")
        slo = None
    levels = list(SweepLevel.objects.filter(sweep=sweep).order_by("index"))
    audited = [lv for lv in levels if lv.state in (LevelState.COMPLETED, LevelState.PARTIAL)]
    found: dict[int, tuple[int, list[str]]] | None = None
    if sweep.records_path:
        found = _audit_levels_streamed(sweep, levels, audited, slo, report)
    for level in audited:
        if found is None and level.summary:
            # Sweeps recorded without a file (imported, constructed) have nothing to recompute.
            continue
        checked, problems = (found or {}).get(level.pk) or (0, audit_level(level, [], slo=slo))
        report.levels_checked += 1
        report.records_checked += checked
        if sweep.records_path:
            problems = problems + audit_level_server(
                level,
                Path(sweep.records_path),
                undrafted_steps=undrafted_steps(sweep.environment or {}),
            )
        report.problems += [f"sweep #{sweep.pk} {p}" for p in problems]
    return report


def _audit_levels_streamed(
    sweep: Sweep,
    levels: list[SweepLevel],
    audited: list[SweepLevel],
    slo: Slo | None,
    report: AuditReport,
) -> dict[int, tuple[int, list[str]]]:
    """Each audited level's (records checked, problems) by level pk, from one pass over the
    sweep's records file; the file's own problems (gone, bad lines, unlabelled rows, rows of
    no level) go into ``report``. A level whose rows are not consecutive in the file (two
    writers interleaved them) is recomputed from the whole file grouped, as before."""
    path = Path(sweep.records_path)
    scan = RecordGroups(path)
    wanted = {(lv.index, lv.attempt): lv for lv in audited}
    counts: dict[tuple[int, int], int] = {}
    results: dict[int, tuple[int, list[str]]] = {}
    unlabelled = 0
    interleaved = False
    for key, rows in scan.groups():
        if key is None:
            unlabelled += len(rows)
            continue
        level = wanted.get(key)
        if level is not None and key in counts:
            interleaved = True
        counts[key] = counts.get(key, 0) + len(rows)
        if level is not None and not interleaved:
            results[level.pk] = (len(rows), audit_level(level, rows, slo=slo))
    if interleaved:
        grouped = read_record_file_once(path)
        results = {
            lv.pk: (len(rows), audit_level(lv, rows, slo=slo))
            for lv in audited
            for rows in [grouped.level(lv.index, lv.attempt)]
        }
    if not scan.exists and any(lv.requests_ok for lv in levels):
        report.problems.append(f"sweep #{sweep.pk}: its records file {path} is gone")
    for number in scan.bad_lines:
        report.problems.append(f"sweep #{sweep.pk}: records line {number} is not a record")
    if unlabelled:
        report.problems.append(f"sweep #{sweep.pk}: {unlabelled} records carry no level index")
    by_index = {lv.index: lv for lv in levels}
    for (index, attempt), count in sorted(counts.items()):
        known = by_index.get(index)
        if known is None or attempt not in _known_attempts(known):
            report.problems.append(
                f"sweep #{sweep.pk}: {count} records of level {index} attempt "
                f"{attempt} belong to no level of this sweep"
            )
    return results


def audit_level_server(
    level: SweepLevel, records_path: Path, *, undrafted_steps: bool = False
) -> list[str]:
    """The level's stored server figures against those recomputed from its kept boundary
    scrapes (benchmarks.sweeps.scrapes); nothing to check where none were kept."""
    stored = level.server_metrics or {}
    if not stored.get("available"):
        return []
    where = f"level {level.index} (C={level.concurrency}, attempt {level.attempt})"
    path = scrapes_path(records_path, index=level.index, attempt=level.attempt)
    try:
        kept = scrapes_read(path)
    except (OSError, ValueError) as exc:
        return [f"{where}: its kept /metrics scrapes cannot be read: {exc}"]
    if kept is None:
        return []
    try:
        before, after = (
            parse_engine_metrics(kept[k]["text"], scraped_at=float(kept[k]["t"]))
            for k in ("open", "close")
        )
    except (KeyError, TypeError, ValueError, MetricsParseError) as exc:
        return [f"{where}: its kept /metrics scrapes cannot be parsed: {exc}"]
    fresh = level_server_metrics(before, after, undrafted_steps=undrafted_steps)
    return [
        f"{where}: server {key}: stored {stored.get(key)}, its scrapes give {fresh.get(key)}"
        for key in SERVER_FIGURES
        if not _close(stored.get(key), fresh.get(key), abs_tol=1e-9)
    ]


def _ratio_rule(result: dict[str, Any], where: str) -> list[str]:
    """Every ratio point is B's row figure over A's; every published interval contains it."""
    problems = []
    metric = str(result.get("metric") or comparisons.METRIC)
    for row in result.get("rows") or []:
        cells = {c.get("label"): c for c in row.get("cells") or []}
        for ratio in row.get("ratios") or []:
            point = ratio.get("point")
            if point is None:
                continue
            a = (cells.get(ratio.get("reference")) or {}).get(metric)
            b = (cells.get(ratio.get("candidate")) or {}).get(metric)
            c = row.get("concurrency")
            if not isinstance(a, int | float) or not isinstance(b, int | float) or a <= 0:
                problems.append(f"{where} C={c}: a ratio without both figures in its row")
                continue
            if not math.isclose(point, b / a, rel_tol=1e-9):
                problems.append(
                    f"{where} C={c}: ratio point {point:.6g} is not the row's "
                    f"{b:.6g} / {a:.6g} = {b / a:.6g}"
                )
            low, high = ratio.get("low"), ratio.get("high")
            if low is not None and high is not None and not low <= point <= high:
                problems.append(
                    f"{where} C={c}: interval {low:.6g}-{high:.6g} does not contain {point:.6g}"
                )
    return problems


# Keys of a stored comparison that are not figures: when it was built.
UNAUDITED_KEYS = frozenset({"built_at"})


def _step_name(item: Any, index: int) -> str:
    """A list element's name in a mismatch's path: its level, label or candidate where it has
    one (rows by C, cells by arm label, ratios by candidate/reference), else its index."""
    if isinstance(item, dict):
        if "candidate" in item and "reference" in item:
            return f"[{item['candidate']}/{item['reference']}]"
        if isinstance(item.get("label"), str):
            return f"[{item['label']}]"
        if isinstance(item.get("concurrency"), int):
            return f"[C={item['concurrency']}]"
    return f"[{index}]"


def _mismatches(stored: Any, fresh: Any, path: str) -> list[str]:
    """Every place where ``stored`` and ``fresh`` disagree (figures to REL_TOL), by path."""
    if isinstance(stored, dict) and isinstance(fresh, dict):
        out = []
        for key in sorted(set(stored) | set(fresh), key=str):
            if key in UNAUDITED_KEYS and not path:
                continue
            where = f"{path}.{key}" if path else str(key)
            if key not in fresh:
                out.append(f"{where}: stored {stored[key]!r}, which a rebuilt one does not have")
            elif key not in stored:
                out.append(f"{where}: not stored, rebuilt gives {fresh[key]!r}")
            else:
                out += _mismatches(stored[key], fresh[key], where)
        return out
    if isinstance(stored, list) and isinstance(fresh, list):
        if len(stored) != len(fresh):
            return [f"{path}: {len(stored)} entries stored, {len(fresh)} rebuilt"]
        out = []
        for i, (a, b) in enumerate(zip(stored, fresh, strict=True)):
            out += _mismatches(a, b, path + _step_name(b, i))
        return out
    if _close(stored, fresh, abs_tol=1e-12):
        return []
    return [f"{path}: stored {stored!r}, rebuilt gives {fresh!r}"]


def comparison_rebuilt(*, experiment: Experiment, with_schedule: bool = False) -> dict[str, Any]:
    """The experiment's comparison built afresh from its levels and records by the very
    functions ``experiment_store_comparison`` builds it with (same drift record, seed and
    bootstrap size); ``with_schedule``: with the speculation schedule kept beside it when the
    experiment ended."""
    fresh = builds.comparison_from_inputs(builds.comparison_inputs(experiment_id=experiment.pk))
    if not with_schedule:
        del fresh["schedule"]
    return fresh


def audit_comparison(*, experiment: Experiment) -> AuditReport:
    """The stored comparison against one rebuilt now from the same levels and records: every
    cell, ratio and interval, goodput ratio, verdict, decision (statuses, crossover, bands,
    recommendation) and statement; each disagreement reported by its path."""
    report = AuditReport(target=f"experiment #{experiment.pk} comparison")
    # As stored now (the caller's object may predate the experiment's end).
    rows = Experiment.objects.filter(pk=experiment.pk).values_list("comparison", flat=True)
    stored: dict[str, Any] = rows.first() or {}
    fresh = comparison_rebuilt(experiment=experiment, with_schedule="schedule" in stored)
    where = f"experiment #{experiment.pk}"
    report.problems += _ratio_rule(fresh, where)
    if stored:
        report.comparisons_checked += 1
        report.problems += _ratio_rule(stored, f"{where} (stored)")
        # As the database hands it back (tuples as lists, keys as strings), so that only a
        # changed value reads as a difference.
        as_stored = json.loads(json.dumps(fresh))
        report.problems += [
            f"{where}: the stored comparison's {m}" for m in _mismatches(stored, as_stored, "")
        ]
    return report


def audit_experiment(*, experiment: Experiment) -> AuditReport:
    report = AuditReport(target=f"experiment #{experiment.pk}")
    # Each sweep's file is read a level at a time for its levels' summaries, then once into
    # columns for the comparison's rebuild.
    with records_read_once():
        for sweep in Sweep.objects.filter(experiment_step__experiment=experiment).order_by("pk"):
            report.extend(audit_sweep(sweep=sweep))
        report.extend(audit_comparison(experiment=experiment))
    return report


def audit_sweeps(*, sweeps: list[Sweep]) -> AuditReport:
    """Several sweeps (a comparison of picked sweeps): each one's levels and records."""
    report = AuditReport(target="sweeps " + ", ".join(f"#{s.pk}" for s in sweeps))
    for sweep in sweeps:
        report.extend(audit_sweep(sweep=sweep))
    return report


def stored_outcome(report: AuditReport) -> dict[str, Any]:
    """What is kept of an audit on the audited row: the report and when it ran."""
    return {**report.as_dict(), "checked_at": timezone.now().isoformat()}


def audit_sweep_store(*, sweep_id: int) -> AuditReport:
    """Audit one sweep and keep the outcome on it, where its pages read it."""
    sweep = Sweep.objects.get(pk=sweep_id)
    report = audit_sweep(sweep=sweep)
    Sweep.objects.filter(pk=sweep_id).update(audit=stored_outcome(report))
    return report


def audit_experiment_store(*, experiment_id: int) -> AuditReport:
    """Audit an experiment (each sweep's outcome kept on the sweep, the whole on the
    experiment), where the comparison page and the HTML report read it."""
    experiment = Experiment.objects.get(pk=experiment_id)
    report = AuditReport(target=f"experiment #{experiment.pk}")
    for sweep in Sweep.objects.filter(experiment_step__experiment=experiment).order_by("pk"):
        report.extend(audit_sweep_store(sweep_id=sweep.pk))
    report.extend(audit_comparison(experiment=experiment))
    Experiment.objects.filter(pk=experiment_id).update(audit=stored_outcome(report))
    return report


def audit_all_store() -> AuditReport:
    """Every sweep and experiment audited, each outcome kept on its row."""
    report = AuditReport(target="everything")
    audited: set[int] = set()
    for experiment_id in Experiment.objects.order_by("pk").values_list("pk", flat=True):
        report.extend(audit_experiment_store(experiment_id=experiment_id))
        audited.update(
            Sweep.objects.filter(experiment_step__experiment_id=experiment_id).values_list(
                "pk", flat=True
            )
        )
    for sweep_id in Sweep.objects.order_by("pk").values_list("pk", flat=True):
        if sweep_id not in audited:
            report.extend(audit_sweep_store(sweep_id=sweep_id))
    return report


def stored_audit_of_sweeps(*, sweeps: list[Sweep]) -> dict[str, Any]:
    """The kept outcomes of several sweeps' last audits as one (a comparison of picked
    sweeps); ``checked`` False where a sweep was never audited. Runs nothing."""
    problems = [p for s in sweeps for p in (s.audit or {}).get("problems") or []]
    return {
        "target": "sweeps " + ", ".join(f"#{s.pk}" for s in sweeps),
        "ok": not problems,
        "problems": problems,
        "checked": all(s.audit for s in sweeps),
    }


def audit_all() -> AuditReport:
    report = AuditReport(target="everything")
    for sweep in Sweep.objects.order_by("pk"):
        report.extend(audit_sweep(sweep=sweep))
    for experiment in Experiment.objects.order_by("pk"):
        report.extend(audit_comparison(experiment=experiment))
    return report
