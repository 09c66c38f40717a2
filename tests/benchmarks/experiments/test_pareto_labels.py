"""The throughput-vs-latency chart's "C=" labels: each series on its own side of its markers,
never clipped, and a point crowded onto the last labelled one of its series left unlabelled
(its C in the hover), so that a saturated server's labels do not pile up."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.experiments.figures import pareto_figure


def _series(label: str, points: Sequence[tuple[int, float | None, float | None]]) -> dict[str, Any]:
    return {
        "label": label,
        "name": label.lower(),
        "levels": [
            {"concurrency": c, "itl_p50_ms": itl, "output_tok_s": tok} for c, itl, tok in points
        ],
    }


def test_crowded_points_lose_their_label_and_series_take_opposite_sides() -> None:
    baseline = [(1, 10.0, 100.0), (2, 20.0, 400.0), (4, 40.0, 700.0), (8, 80.0, 705.0),
                (16, 81.0, 707.0)]  # fmt: skip
    eagle = [(1, 5.0, 110.0), (2, 15.0, 380.0), (4, None, None), (8, 60.0, 500.0)]
    comparison: Any = {"series": [_series("A", baseline), _series("B", eagle)]}
    figure = pareto_figure(comparison)
    a, b = figure["data"]
    # C=16 sits 1 ms and 2 tok/s from C=8 (spans 76 ms and 607 tok/s): no label of its own.
    assert a["text"] == ["C=1", "C=2", "C=4", "C=8", ""]
    assert b["text"] == ["C=1", "C=2", "", "C=8"]
    assert a["customdata"] == [1, 2, 4, 8, 16]
    assert (a["textposition"], b["textposition"]) == ("top left", "bottom right")
    assert a["cliponaxis"] is False and b["cliponaxis"] is False
