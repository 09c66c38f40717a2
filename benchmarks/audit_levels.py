"""A sweep's levels audited: each stored level figure recomputed from the raw records.

Each level row's summary is recomputed by the load generator's own ``summarize_level`` from
that level attempt's records (benchmarks.sweeps.recordfile) and compared with the stored
summary and its headline columns (counts, tokens, tok/s, percentiles, steady window,
per-request acceptance) and, under the sweep's SLO, its goodput (share, req/s, tok/s,
verdict); its server figures are recomputed from the level's kept boundary /metrics scrapes
(benchmarks.sweeps.scrapes) where they were kept; records that belong to no level attempt, and
lines that are not records, are reported. Apart from the comparison's audit
(audit_comparison.py), which rebuilds figures from these same levels.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from benchlib.json_types import JsonObject
from benchlib.loadgen.goodput import Slo
from benchlib.loadgen.metrics import summarize_level
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.summary import LevelSummary
from benchmarks.audit_report import AuditReport, figures_agree
from benchmarks.sweeps.level_figures import LEVEL_COLUMNS
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel
from benchmarks.sweeps.recordfile import RecordGroups, read_record_file_once
from benchmarks.sweeps.recording import level_fields_from_summary, undrafted_steps
from benchmarks.sweeps.scrapes import scrapes_path, scrapes_read
from hosts.telemetry.levels import level_server_metrics
from hosts.telemetry.prometheus import MetricsParseError, parse_engine_metrics

# A time's absolute tolerance in ms, beside the relative one (audit_report.REL_TOL): records
# keep times to 1 us.
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


def _differences(stored: Mapping[str, Any], fresh: Mapping[str, Any]) -> list[str]:
    out = []
    for key in ("total", "ok", "failed"):
        a, b = (stored.get("requests") or {}).get(key), (fresh.get("requests") or {}).get(key)
        if a != b:
            out.append(f"requests {key}: stored {a}, records give {b}")
    for key in SCALARS:
        if not figures_agree(stored.get(key), fresh.get(key), abs_tol=1e-9):
            out.append(f"{key}: stored {stored.get(key)}, records give {fresh.get(key)}")
    for group, keys in NESTED:
        a_group, b_group = stored.get(group) or {}, fresh.get(group) or {}
        for key in keys:
            a, b = a_group.get(key), b_group.get(key)
            if not figures_agree(a, b, abs_tol=1e-9):
                out.append(f"{group} {key}: stored {a}, records give {b}")
    for name in DISTRIBUTIONS:
        a_dist, b_dist = stored.get(name) or {}, fresh.get(name) or {}
        for key in DIST_KEYS:
            a, b = a_dist.get(key), b_dist.get(key)
            if not figures_agree(a, b, abs_tol=ABS_TOL_MS):
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
        if not figures_agree(stored.get(key), fresh.get(key), abs_tol=1e-9):
            out.append(f"goodput {key}: stored {stored.get(key)}, records give {fresh.get(key)}")
    return out


def audit_level(
    level: SweepLevel, records: list[JsonObject], *, slo: Slo | None = None
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
    # Not empty (returned above): the level summary the load generator wrote, as stored.
    columns: Mapping[str, object] = level_fields_from_summary(cast(LevelSummary, summary))
    for name in LEVEL_COLUMNS:
        if not figures_agree(getattr(level, name), columns[name], abs_tol=1e-9):
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
        if not figures_agree(stored.get(key), fresh.get(key), abs_tol=1e-9)
    ]
