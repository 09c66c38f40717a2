"""An experiment's stored comparison audited against one rebuilt now from the same levels.

Field by field (cells, ratios, intervals, goodput ratios, verdicts, decisions and their
statements), and the one-truth rule (every ratio point is the ratio of the figures in its row;
every interval contains its point). Apart from the level audit (audit_levels.py): this one
rebuilds through the experiments' own builds and walks a JSON tree, not records.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from benchmarks.audit_report import AuditReport, figures_agree
from benchmarks.experiments import builds
from benchmarks.experiments.level_runs import METRIC
from benchmarks.experiments.models import Experiment

if TYPE_CHECKING:
    from benchmarks.experiments.builds import StoredComparison


def _ratio_rule(result: StoredComparison, where: str) -> list[str]:
    """Every ratio point is B's row figure over A's; every published interval contains it."""
    problems = []
    metric = str(result.get("metric") or METRIC)
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
    if figures_agree(stored, fresh, abs_tol=1e-12):
        return []
    return [f"{path}: stored {stored!r}, rebuilt gives {fresh!r}"]


def comparison_rebuilt(*, experiment: Experiment, with_schedule: bool = False) -> StoredComparison:
    """The experiment's comparison built afresh from its levels and records by the very
    functions ``experiment_store_comparison`` builds it with (same drift record and
    intervals); ``with_schedule``: with the speculation schedule kept beside it when the
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
    # As the build wrote it; {} until one is kept (None where the row is gone).
    stored: StoredComparison | None = rows.first()
    fresh = comparison_rebuilt(
        experiment=experiment, with_schedule=stored is not None and "schedule" in stored
    )
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
