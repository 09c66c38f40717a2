"""One level's summary as the run reports it, computed from its records as they are stored.

Apart from the run (cli.py), which calls it once per level, and from the figures themselves
(metrics.py, reasoning.py, sessions.py): this is where they are put together for one level,
from records rounded exactly as the records file holds them, so that an audit recomputing the
summary from the file decides every threshold the same way.
"""

from __future__ import annotations

from benchlib.loadgen.goodput import Slo
from benchlib.loadgen.level_config import LevelResult
from benchlib.loadgen.metrics import RecordSource, summarize_level_passes
from benchlib.loadgen.reasoning import reasoning_figures
from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.sessions import session_figures, turn_figures
from benchlib.loadgen.summary import LevelSummary


def level_summary(
    result: LevelResult,
    *,
    processes: int,
    slo: Slo | None = None,
    stored: RecordSource | None = None,
) -> LevelSummary:
    """The level's summary, computed from its records exactly as the records file holds them
    (epoch times rounded to 1 us): a threshold such as the delivery gap then decides the same
    way here and in an audit that recomputes the summary from the file. `stored` reads the
    level's records back from the file (several passes, one record in memory at a time); without
    it they are `result.records`, rounded the same way."""
    if stored is None:
        as_stored = [
            RequestRecord.from_json(r.to_json(result.anchor, level_index=0), result.anchor)
            for r in result.records
        ]
        stored = lambda: as_stored  # noqa: E731 - the same reading for the figures below
    summary = summarize_level_passes(
        stored,
        concurrency=result.concurrency,
        mode=result.mode,
        partial=result.partial,
        anchor=result.anchor,
        slo=slo,
    )
    summary["level_index"] = result.level_index
    summary["status"] = result.status
    summary["reason"] = result.reason
    summary["processes"] = processes
    summary["warmup_requests"] = len(result.warmup_records) or result.warmup_count
    summary["client"] = result.client
    summary["anchor"] = result.anchor.to_dict()
    # One more pass each over the level's records (read back from the file when streamed).
    reasoning = reasoning_figures(stored())
    if reasoning is not None:
        summary["reasoning"] = reasoning
    turns = turn_figures(stored())
    if turns:
        summary["turns"] = turns
    sessions = session_figures(stored())
    if sessions is not None:
        summary["sessions"] = sessions
    return summary
