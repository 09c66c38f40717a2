"""The kept outcomes of sweeps' audits, read back for a comparison of picked sweeps (its page and
its HTML report). Runs no audit: each sweep keeps its last one's outcome in its ``audit`` field
(``benchmarks.audit``, above this slice, writes it at the sweep's end and on demand).
"""

from __future__ import annotations

from typing import TypedDict

from benchmarks.sweeps.models import Sweep


class SweepsAudit(TypedDict):
    """``stored_audit_of_sweeps``: the picked sweeps' kept outcomes as one."""

    target: str
    ok: bool
    problems: list[str]
    checked: bool  # every sweep was audited


def stored_audit_of_sweeps(*, sweeps: list[Sweep]) -> SweepsAudit:
    """The kept outcomes of several sweeps' last audits as one (a comparison of picked
    sweeps); ``checked`` False where a sweep was never audited. Runs nothing."""
    problems = [p for s in sweeps for p in (s.audit or {}).get("problems") or []]
    return {
        "target": "sweeps " + ", ".join(f"#{s.pk}" for s in sweeps),
        "ok": not problems,
        "problems": problems,
        "checked": all(s.audit for s in sweeps),
    }
