"""What every surface of a break-even map shows, built once: the JSON payload (page, API),
the CSV, and the Plotly heat map with the break-even contour, its band and the placed
workload (no ORM here)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any, TypedDict

from benchlib.json_types import JsonObject, PlotlyFigure
from benchlib.stats.breakeven import (
    BreakevenMap,
    BreakevenMapJson,
    PredictionCheck,
    PredictionCheckJson,
)
from benchmarks.experiments.breakeven import Placement

CSV_COLUMNS = (
    "kind", "category", "accept_length", "concurrency", "ratio", "low", "high", "status",
)  # fmt: skip
_STATUS_MARK = {
    "ahead": "ahead",
    "behind": "behind",
    "equivalent": "equiv.",
    "inconclusive": "?",
    "not_comparable": "n/c",
}


class PlacementPayload(TypedDict):
    """A workload placed on the map: its source, profile and categories (each
    ``CategoryPlacement.to_dict``)."""

    source: str
    profile: str
    categories: list[JsonObject]


class CheckPayload(TypedDict):
    """One of the map's checks, with its result (``PredictionCheck.to_dict``) once run."""

    id: int
    category: str
    source: str
    verification_id: int
    verification_state: str
    created_at: str
    result: PredictionCheckJson | None


class MapPayload(TypedDict):
    """``map_payload``: the map (``BreakevenMap.to_dict``), the placement and the checks."""

    map: BreakevenMapJson
    placement: PlacementPayload | None
    checks: list[CheckPayload]


def map_payload(
    bmap: BreakevenMap,
    placement: Placement | None,
    checks: Sequence[tuple[Any, PredictionCheck | None]] = (),
) -> MapPayload:
    """The map, the placement and the checks as plain JSON (the API's body, the page's data)."""
    return {
        "map": bmap.to_dict(),
        "placement": None
        if placement is None
        else {
            "source": placement.source,
            "profile": placement.profile.name,
            "categories": [p.to_dict() for p in placement.categories],
        },
        "checks": [
            {
                "id": check.pk,
                "category": check.category,
                "source": check.source,
                "verification_id": check.verification_id,
                "verification_state": check.verification.state,
                "created_at": check.created_at.isoformat(),
                "result": None if result is None else result.to_dict(),
            }
            for check, result in checks
        ],
    }


def map_csv(bmap: BreakevenMap, placement: Placement | None) -> str:
    """One row per map cell ("map") and per placed category and level ("predicted")."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for cell in bmap.cells:
        r = cell.ratio
        writer.writerow(
            ["map", "", cell.accept_length, cell.concurrency, r.point, r.low, r.high, cell.status]
        )
    for p in placement.categories if placement is not None else ():
        for level in p.decision.levels:
            r = level.ratio
            writer.writerow(
                ["predicted", p.category, p.acceptance.get(level.concurrency),
                 level.concurrency, r.point, r.low, r.high, level.status]
            )  # fmt: skip
    return out.getvalue()


def map_figure(bmap: BreakevenMap, placement: Placement | None) -> PlotlyFigure:
    """The heat map: B/A per forced accept length (y) and concurrency (x, one column per
    tested level), 1 in white, each cell labelled with its ratio and status; the contour
    (B/A = 1 from the points) and its band (from the interval bounds); each placed category's
    measured accept length per level with its predicted ratio."""
    xs = [str(c) for c in bmap.levels]
    z, text = [], []
    for a in bmap.acceptances:
        row, labels = [], []
        for c in bmap.levels:
            cell = bmap.cell(a, c)
            row.append(None if cell is None else cell.ratio.point)
            labels.append(
                "" if cell is None else f"{cell.ratio.point:.2f} {_STATUS_MARK[cell.status]}"
            )
        z.append(row)
        text.append(labels)
    points = [v for row in z for v in row if v is not None]
    spread = max([abs(v - 1.0) for v in points] + [0.05])
    data: list[dict[str, Any]] = [
        {
            "type": "heatmap", "x": xs, "y": list(bmap.acceptances), "z": z,
            "text": text, "texttemplate": "%{text}", "zmid": 1.0,
            "zmin": 1.0 - spread, "zmax": 1.0 + spread,
            "colorscale": [[0.0, "#c92a2a"], [0.5, "#ffffff"], [1.0, "#2b8a3e"]],
            "colorbar": {"title": {"text": "B/A"}}, "name": "B/A",
            "hovertemplate": "C=%{x}, forced L=%{y}: %{text}<extra></extra>",
        },
    ]  # fmt: skip
    contour = bmap.contour()
    for key, name, dash in (("low", "band: interval's high = 1", "dot"),
                            ("at", "break-even (B/A = 1)", "solid"),
                            ("high", "band: interval's low = 1", "dot")):  # fmt: skip
        pts = [(str(p.concurrency), getattr(p, key)) for p in contour]
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": name,
            "x": [x for x, y in pts], "y": [y for x, y in pts], "connectgaps": False,
            "line": {"color": "#212529", "dash": dash, "width": 3 if key == "at" else 1.5},
        })  # fmt: skip
    for i, p in enumerate(placement.categories if placement is not None else ()):
        levels = [lv for lv in p.decision.levels]
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": f"{p.category} (placed)",
            "x": [str(lv.concurrency) for lv in levels],
            "y": [p.acceptance[lv.concurrency] for lv in levels],
            # The predicted ratio on hover: a label would sit on the cells' own.
            "customdata": [f"{lv.ratio.point:.3f} {lv.status}" for lv in levels],
            "hovertemplate": f"{p.category}: C=%{{x}}, L=%{{y:.2f}}, predicted B/A "
            "%{customdata}<extra></extra>",
            "marker": {"symbol": ("diamond", "square", "triangle-up")[i % 3], "size": 12,
                       "color": ("#1c7ed6", "#f08c00", "#7048e8")[i % 3],
                       "line": {"color": "#000", "width": 1}},
        })  # fmt: skip
    layout = {
        "title": {"text": "Break-even map: B/A (forced acceptance vs speculation off)",
                  "font": {"size": 14}},
        "margin": {"l": 64, "r": 20, "t": 40, "b": 48},
        "xaxis": {"title": {"text": "concurrency (C)"}, "type": "category"},
        "yaxis": {"title": {"text": "accept length (tokens per verify step)"}},
        "legend": {"orientation": "h", "y": -0.15},
    }  # fmt: skip
    return {"data": data, "layout": layout}
