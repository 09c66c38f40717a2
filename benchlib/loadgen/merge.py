from __future__ import annotations

# Exact merging of records from several processes.
#
# Each process timestamps with its own perf_counter() and keeps a ClockAnchor. Merging rebases
# every record onto one reference anchor through the wall clock; the level summary is then
# computed once, by `metrics.summarize_level`, over the union. Summaries (percentiles above all)
# are never averaged.
from collections.abc import Sequence
from typing import Any

from benchlib.loadgen.level_config import LevelResult
from benchlib.loadgen.records import ClockAnchor, RequestRecord

_STATUS_RANK = {"completed": 0, "cancelled": 1, "failed": 2}


def merge_records(
    parts: Sequence[tuple[ClockAnchor, Sequence[RequestRecord]]],
    *,
    anchor: ClockAnchor | None = None,
) -> tuple[ClockAnchor, list[RequestRecord]]:
    """All records on one perf clock (`anchor`, or the first part's), ordered by start time."""
    if not parts:
        raise ValueError("nothing to merge")
    ref = anchor or parts[0][0]
    out: list[RequestRecord] = []
    for part_anchor, records in parts:
        delta = part_anchor.shift_to(ref)
        out.extend(r.shifted(delta) if delta else r for r in records)
    out.sort(key=lambda r: (r.start, r.request_id))
    return ref, out


def merge_client_health(healths: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per-process health kept as is, plus the worst figures across processes."""
    if not healths:
        return {}
    return {
        "loop_lag_ms": {
            "p99": max(h["loop_lag_ms"]["p99"] or 0.0 for h in healths),
            "max": max(h["loop_lag_ms"]["max"] or 0.0 for h in healths),
        },
        "cpu_pct": {
            "mean": max(h["cpu_pct"]["mean"] for h in healths),
            "max": max(h["cpu_pct"]["max"] for h in healths),
        },
        "client_limited": any(h["client_limited"] for h in healths),
        "warnings": [f"process {i}: {w}" for i, h in enumerate(healths) for w in h["warnings"]],
        "arrivals": {
            "count": sum(h.get("arrivals", {}).get("count", 0) for h in healths),
            "late": sum(h.get("arrivals", {}).get("late", 0) for h in healths),
            "late_p99_ms": max(h.get("arrivals", {}).get("late_p99_ms", 0.0) for h in healths),
        },
        "load_source_starved": any(h.get("load_source_starved") for h in healths),
        "starved_reason": "; ".join(
            f"process {i}: {h['starved_reason']}"
            for i, h in enumerate(healths)
            if h.get("starved_reason")
        ),
        "processes": list(healths),
    }


def merge_results(results: Sequence[LevelResult]) -> LevelResult:
    """One LevelResult from the per-process results of a split level."""
    if not results:
        raise ValueError("nothing to merge")
    anchor, records = merge_records([(r.anchor, r.records) for r in results])
    _, warmups = merge_records([(r.anchor, r.warmup_records) for r in results], anchor=anchor)
    worst = max(results, key=lambda r: _STATUS_RANK.get(r.status, 2))
    reasons = [r.reason for r in results if r.status == worst.status and r.reason]
    return LevelResult(
        level_index=results[0].level_index,
        concurrency=sum(r.concurrency for r in results),
        mode=results[0].mode,
        anchor=anchor,
        records=records,
        warmup_records=warmups,
        status=worst.status,
        reason=reasons[0] if reasons else worst.reason,
        client=merge_client_health([r.client for r in results]),
        measured_count=sum(r.measured_count for r in results),
        warmup_count=sum(r.warmup_count for r in results),
    )
