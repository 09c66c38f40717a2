"""A profile's history: per sweep, its single-stream and saturation throughput (the history
page of a profile, benchmarks.experiments.views.profile_history)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from benchlib.stats import Curve, find_saturation
from benchmarks.experiments.comparison import saturation_dict


@dataclass(frozen=True)
class HistoryRun:
    sweep_id: int
    name: str
    created_at: datetime
    levels: dict[int, float]  # concurrency -> output tok/s of its completed levels
    tags: tuple[str, ...] = ()


def history_build(*, runs: Sequence[HistoryRun]) -> list[dict[str, Any]]:
    """Per sweep of one profile: its lowest-C (single-stream) and saturation throughput."""
    out = []
    for run in runs:
        levels = {c: v for c, v in run.levels.items() if v is not None and v > 0}
        if not levels:
            continue
        lowest = min(levels)
        saturation = find_saturation(Curve.from_values(run.name, levels))
        out.append(
            {
                "sweep_id": run.sweep_id,
                "name": run.name,
                "created_at": run.created_at.isoformat(),
                "lowest_concurrency": lowest,
                "lowest_tok_s": levels[lowest],
                "c1_tok_s": levels.get(1),
                "saturation": saturation_dict(saturation),
                "levels": sorted(levels),
                "tags": list(run.tags),
            }
        )
    return out
