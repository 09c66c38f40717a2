"""What an audit reports, and when a stored figure agrees with the one recomputed.

Apart from the audits themselves (audit_levels.py: a sweep's levels against their records and
scrapes; audit_comparison.py: an experiment's stored comparison against a rebuilt one) because
both fill the same report and hold figures to the same tolerance; audit.py runs them together
and keeps the outcome on the audited rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypedDict

# Records keep times to 1 us, so recomputed durations and rates agree to about 1e-6; a
# record lost, duplicated or altered moves a figure by far more than these.
REL_TOL = 1e-4


class AuditReportBody(TypedDict):
    """``AuditReport.as_dict``: what the API, the command line and the audited rows show."""

    target: str
    ok: bool
    problems: list[str]
    levels_checked: int
    records_checked: int
    comparisons_checked: int


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

    def as_dict(self) -> AuditReportBody:
        return {
            "target": self.target,
            "ok": self.ok,
            "problems": list(self.problems),
            "levels_checked": self.levels_checked,
            "records_checked": self.records_checked,
            "comparisons_checked": self.comparisons_checked,
        }


def figures_agree(a: Any, b: Any, *, abs_tol: float = 0.0) -> bool:
    """Numbers within REL_TOL (or ``abs_tol``); anything else, flags and None included, equal."""
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a == b)
    if isinstance(a, int | float) and isinstance(b, int | float):
        if not (math.isfinite(a) and math.isfinite(b)):
            return bool(a == b)
        return math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=abs_tol)
    return bool(a == b)
