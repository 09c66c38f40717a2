"""The level's headline figures: the summary figures each ``SweepLevel`` also keeps in a column
of its own (``recording.level_fields_from_summary`` fills them), for ordering, filtering and
cheap history queries.

The figures are declared once, as the level row's keys (``rows.HeadlineFigures`` and
``rows.LevelFigures``); their names are listed here, in the sweeps slice, because two readers
above it go through them: the sweep's audit recomputes each column from the records
(``benchmarks.audit_levels``), and the comparison averages them over a level's repeats for its
table and charts (``benchmarks.experiments.series``, ``level_rows``). Neither reaches the other
for them.
"""

from __future__ import annotations

from benchmarks.sweeps.rows import HeadlineFigures, LevelFigures

# Read off the declarations (a TypedDict's keys, inherited ones first, in their declared
# order), so a figure added to or dropped from the row reaches every reader of the names.
LEVEL_FIGURES: tuple[str, ...] = tuple(HeadlineFigures.__annotations__)
# What the audit recomputes from the records: every figure of the level's row that is a
# number (its request counts too), all but the reason.
LEVEL_COLUMNS: tuple[str, ...] = tuple(
    name for name in LevelFigures.__annotations__ if name != "reason"
)
