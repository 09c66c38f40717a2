"""A level's attempts besides the one its row stands for.

A level run again (a resume, a retry) keeps what the earlier attempt left in its row under
``earlier_attempts``. And a resume finds the attempts the dashboard never heard start: the
load generator emits a level's start and goes on to send its requests, so when its worker is
lost in between (SIGKILL, a lost host) it can write records of a level whose start never
reached the database before it notices its reader is gone and stops. Those records are true
and kept in the append-only file; the resume gives them the level attempt they belong to, so
that every record in the file belongs to a level attempt (the audit checks it) and none is
counted as the level's figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from django.db import transaction

from benchlib.json_types import JsonObject
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel
from benchmarks.sweeps.plan import sweep_level_plan
from benchmarks.sweeps.recordfile import MeasuredCounts, attempt_counts


class EarlierAttempt(TypedDict):
    """One entry of a level's ``earlier_attempts``: its row as an earlier attempt left it."""

    attempt: int
    state: str
    reason: str
    requests_ok: int
    requests_failed: int
    output_tok_s: float | None
    summary: JsonObject  # the level summary it had (LevelSummary, as stored)
    server_metrics: JsonObject
    started_at: str | None  # ISO 8601
    finished_at: str | None


def earlier_attempt(level: SweepLevel) -> EarlierAttempt:
    """What a level's row held before the level was run again: kept beside the new run."""
    return {
        "attempt": level.attempt,
        "state": level.state,
        "reason": level.reason,
        "requests_ok": level.requests_ok,
        "requests_failed": level.requests_failed,
        "output_tok_s": level.output_tok_s,
        "summary": level.summary,
        "server_metrics": level.server_metrics,
        "started_at": level.started_at.isoformat() if level.started_at else None,
        "finished_at": level.finished_at.isoformat() if level.finished_at else None,
    }


def unheard_reason(attempt: int, counts: MeasuredCounts) -> str:
    return (
        f"attempt {attempt} was started by the load generator after the dashboard last heard "
        "from it (its worker was lost before the level's start was stored): "
        f"{counts.ok + counts.failed} measured requests kept in the records file, counted "
        "from there; never summarised"
    )


def unheard_attempts_record(sweep: Sweep) -> list[SweepLevel]:
    """Give each level attempt of an earlier run that the records file holds and no level row
    knows its place, and return the rows changed: a level with no row gets one, partial, for
    its latest such attempt; the others join the row's ``earlier_attempts``. Attempts of the
    run now starting (``sweep.attempts``) and indexes outside the sweep are left alone (the
    audit reports the latter)."""
    if not sweep.records_path:
        return []
    # A rate sweep's levels are its rates, each at the one concurrency cap.
    plan = sweep_level_plan(sweep.levels, sweep.load)
    # The file is read before the rows are locked: a resume's file can be long.
    found = {
        key: counts
        for key, counts in attempt_counts(Path(sweep.records_path)).items()
        if key[1] < sweep.attempts and 0 <= key[0] < len(plan)
    }
    if not found:
        return []
    changed: dict[int, SweepLevel] = {}
    with transaction.atomic():
        rows = SweepLevel.objects.select_for_update().filter(sweep_id=sweep.pk)
        levels = {level.index: level for level in rows}
        # Latest first: a level with no row gets one for its latest unheard attempt, and its
        # older ones are earlier attempts of it.
        for (index, attempt), counts in sorted(found.items(), key=lambda f: -f[0][1]):
            # The row the attempt would have left, had its start been stored: partial, its
            # records' counts, no figures.
            unheard = SweepLevel(
                sweep_id=sweep.pk,
                index=index,
                concurrency=plan[index][0],
                attempt=attempt,
                state=LevelState.PARTIAL,
                reason=unheard_reason(attempt, counts),
                requests_ok=counts.ok,
                requests_failed=counts.failed,
            )
            level = levels.get(index)
            if level is None:
                level = levels[index] = unheard
            elif attempt == level.attempt or any(
                e.get("attempt") == attempt for e in level.earlier_attempts
            ):
                continue
            else:
                level.earlier_attempts = sorted(
                    [*level.earlier_attempts, earlier_attempt(unheard)],
                    key=lambda e: int(e.get("attempt") or 0),
                )
            changed[index] = level
        for level in changed.values():
            level.save()
    return list(changed.values())
