"""The level's headline figures: the summary figures each ``SweepLevel`` also keeps in a column
of its own (``recording.level_fields_from_summary`` fills them), for ordering, filtering and
cheap history queries.

Declared here, in the sweeps slice, because two readers above it go through these names: the
sweep's audit recomputes each column from the records (``benchmarks.audit_levels``), and the
comparison averages them over a level's repeats for its table and charts
(``benchmarks.experiments.series``, ``level_rows``). Neither reaches the other for them.
"""

from __future__ import annotations

LEVEL_FIGURES = (
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
