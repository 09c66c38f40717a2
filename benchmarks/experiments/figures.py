"""Plotly figures of a comparison, built once as plain dicts.

The comparison page hands them to ``Plotly.newPlot`` as they are (static/specdash/
comparison.js adds the PNG/SVG export buttons), and the HTML report renders the same dicts
with ``plotly.io.to_html``: one definition, two outputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchlib.json_types import PlotlyFigure

if TYPE_CHECKING:
    from benchmarks.experiments.comparison import SeriesEntry
    from benchmarks.experiments.history import HistoryPoint


COLORS = ("#2f6fdb", "#d9480f", "#2b8a3e", "#7048e8", "#c2255c", "#0b7285", "#e67700", "#495057")
_MARGIN = {"l": 64, "r": 20, "t": 40, "b": 48}


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _name(series: SeriesEntry) -> str:
    return f"{series['label']}: {series['name']}"


def _log_c_axis(concurrencies: list[int]) -> dict[str, Any]:
    return {"type": "log", "title": {"text": "concurrency (C)"}, "tickvals": concurrencies}


def _concurrencies(comparison: dict[str, Any]) -> list[int]:
    return sorted({r["concurrency"] for s in comparison["series"] for r in s["levels"]})


def _layout(title: str, x: dict[str, Any], y_title: str, **extra: Any) -> dict[str, Any]:
    return {
        "title": {"text": title, "font": {"size": 14}},
        "margin": _MARGIN,
        "xaxis": x,
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero"},
        **extra,
    }


# The legend goes under the x axis's title, in the figure's own bottom margin (``yref``
# container), from the figure's left edge (``xref`` container): a legend placed in plot-height
# units (y = -0.22) lands on the axis title at some heights. Its rows are estimated for the
# narrowest chart it may appear in: on the pages a grid card's (the grid's 420 px minimum less
# the card's padding: about 386 px; half of a 1000 px page, a third of a 1400 px one), where
# charts.js then fits the margin to the rows the legend really took; in the report, whose
# charts span the page, a 1000 px window's. Widths are estimates of Plotly's 12 px text
# (symbol + 6.5 px a char). The figure states its height (plot + margins), so more rows make
# the chart taller, never its plot smaller (charts.js sizes the box; the report passes it).
CARD_LEGEND_WIDTH_PX = 380
REPORT_LEGEND_WIDTH_PX = 880
_AXIS_BELOW_PX = 56  # tick labels and the x axis's title
_LEGEND_ROW_PX = 20
_LEGEND_LINE_PX = 16  # each further line of a wrapped entry
# Plotly cuts a legend entry wider than its chart at the SVG's edge (past the card): a longer
# name wraps onto lines of at most this many characters (48 * 6.5 px + the symbol: ~360 px).
LEGEND_LINE_CHARS = 48
# Where an unbroken token (a model path, a run id) may break when it is longer than a line.
_BREAK_MARKS = "/_-.,:="
PLOT_HEIGHT_PX = 240
_TITLE_CHARS = 58  # a title longer than this wraps (a half-width card clips it otherwise)
_TITLE_LINE_PX = 18


def _legend_row_lines(labels: list[str], width_px: int) -> list[int]:
    """Per legend row, the lines of its tallest entry, as Plotly fills rows left to right."""
    rows: list[int] = []
    used = float(width_px)
    for label in labels:
        lines = label.split("<br>")
        entry = 46 + 6.5 * max(len(line) for line in lines)
        if used + entry > width_px:
            rows.append(0)
            used = 0.0
        rows[-1] = max(rows[-1], len(lines))
        used += entry
    return rows


def legend_rows(names: list[str], width_px: int = CARD_LEGEND_WIDTH_PX) -> int:
    return len(_legend_row_lines(names, width_px))


def legend_height_px(labels: list[str], width_px: int = CARD_LEGEND_WIDTH_PX) -> int:
    """The height the legend of these (wrapped) labels takes."""
    return sum(
        _LEGEND_ROW_PX + _LEGEND_LINE_PX * (lines - 1)
        for lines in _legend_row_lines(labels, width_px)
    )


def _token_pieces(token: str, width: int, first: int) -> list[str]:
    """``token`` in pieces of at most ``width`` characters (the first at most ``first``)."""
    pieces: list[str] = []
    room = first
    while len(token) > room:
        cut = max(token.rfind(mark, 0, room) for mark in _BREAK_MARKS) + 1
        if cut < room // 3:  # no break mark far enough in: cut at the line's end
            cut = room
        pieces.append(token[:cut])
        token, room = token[cut:], width
    return [*pieces, token]


def legend_label(name: str, width: int = LEGEND_LINE_CHARS) -> str:
    """``name`` as legend lines of at most ``width`` characters joined by ``<br>``: broken at
    spaces, and a longer unbroken token after one of its ``/_-.,:=`` (else at the line's end).
    Every character of the name is kept: wrapped, never shortened."""
    lines: list[str] = []
    for word in name.split(" "):
        room = width - len(lines[-1]) - 1 if lines else width
        if len(word) <= room:
            if lines:
                lines[-1] += " " + word
            else:
                lines.append(word)
            continue
        # A token longer than a line starts on the current line when a fair part of it fits.
        joins = bool(lines) and len(word) > width and room >= width // 3
        pieces = _token_pieces(word, width, room if joins else width)
        if joins:
            lines[-1] += " " + pieces.pop(0)
        lines.extend(pieces)
    return "<br>".join(lines)


def _wrapped(text: str) -> list[str]:
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= _TITLE_CHARS:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def legend_below(figure: PlotlyFigure, legend_width_px: int = CARD_LEGEND_WIDTH_PX) -> PlotlyFigure:
    """``figure`` with its legend under the x axis title, its long entries wrapped, and the
    bottom margin that holds it."""
    data = [
        {**trace, "name": legend_label(str(trace["name"]))} if trace.get("name") else trace
        for trace in figure["data"]
    ]
    labels = [
        str(trace["name"]) for trace in data if trace.get("showlegend", True) and trace.get("name")
    ]
    layout = dict(figure["layout"])
    margin = dict(layout.get("margin") or _MARGIN)
    margin["b"] = _AXIS_BELOW_PX + legend_height_px(labels, legend_width_px) + 8
    title = dict(layout.get("title") or {})
    lines = _wrapped(str(title.get("text") or ""))
    if len(lines) > 1:
        layout["title"] = {**title, "text": "<br>".join(lines)}
    margin["t"] = int(margin.get("t", 40)) + _TITLE_LINE_PX * (len(lines) - 1)
    layout["margin"] = margin
    layout["height"] = PLOT_HEIGHT_PX + margin["t"] + margin["b"]
    layout["legend"] = {
        "orientation": "h", "x": 0, "xanchor": "left", "xref": "container",
        "y": 0, "yanchor": "bottom", "yref": "container",
        # Plotly caps a horizontal legend at half the figure and scrolls the rest out of
        # sight: the margin holds all of it, so the cap is the whole figure.
        "maxheight": 1,
    }  # fmt: skip
    return {"data": data, "layout": layout}


def throughput_figure(comparison: dict[str, Any]) -> PlotlyFigure:
    data = []
    for i, s in enumerate(comparison["series"]):
        xs = [r["concurrency"] for r in s["levels"]]
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": f"{_name(s)} (whole level)",
            "x": xs, "y": [r["output_tok_s"] for r in s["levels"]],
            "line": {"color": _color(i)}, "legendgroup": s["label"],
        })  # fmt: skip
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": f"{_name(s)} (steady window)",
            "x": xs, "y": [r["steady_output_tok_s"] for r in s["levels"]],
            "line": {"color": _color(i), "dash": "dot"}, "legendgroup": s["label"],
        })  # fmt: skip
    layout = _layout(
        "Output throughput vs concurrency",
        _log_c_axis(_concurrencies(comparison)),
        "output tok/s",
    )
    return {"data": data, "layout": layout}


def _metric_figure(comparison: dict[str, Any], metric: str, title: str, unit: str) -> PlotlyFigure:
    data = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": _name(s),
            "x": [r["concurrency"] for r in s["levels"]],
            "y": [r[metric] for r in s["levels"]],
            "line": {"color": _color(i)},
        }
        for i, s in enumerate(comparison["series"])
    ]
    return {"data": data, "layout": _layout(title, _log_c_axis(_concurrencies(comparison)), unit)}


def ttft_figure(comparison: dict[str, Any]) -> PlotlyFigure:
    return _metric_figure(
        comparison, "ttft_p50_ms", "Time to first token (p50) vs concurrency", "ms"
    )


def itl_figure(comparison: dict[str, Any]) -> PlotlyFigure:
    return _metric_figure(
        comparison, "itl_p50_ms", "Inter-token latency (token-level p50) vs concurrency", "ms"
    )


# Where each series' "C=" labels sit around its markers: two series whose points are close
# put their labels on opposite sides.
_LABEL_POSITIONS = ("top left", "bottom right", "top right", "bottom left")
# A point closer than this share of both axes' spans to the last labelled point of its series
# (a saturated server's last levels) gets no label of its own: its C stays in the hover.
_LABEL_MIN_SPACING = 0.05


def _spaced_labels(
    points: list[tuple[float | None, float | None, int]], x_span: float, y_span: float
) -> list[str]:
    labels: list[str] = []
    last: tuple[float, float] | None = None
    for x, y, concurrency in points:
        if x is None or y is None:
            labels.append("")
            continue
        crowded = last is not None and (
            abs(x - last[0]) < _LABEL_MIN_SPACING * x_span
            and abs(y - last[1]) < _LABEL_MIN_SPACING * y_span
        )
        labels.append("" if crowded else f"C={concurrency}")
        if not crowded:
            last = (x, y)
    return labels


def pareto_figure(comparison: dict[str, Any]) -> PlotlyFigure:
    """Throughput against per-token latency: up and to the left is better."""
    xs = [r["itl_p50_ms"] for s in comparison["series"] for r in s["levels"]]
    ys = [r["output_tok_s"] for s in comparison["series"] for r in s["levels"]]
    present_x = [v for v in xs if v is not None]
    present_y = [v for v in ys if v is not None]
    x_span = (max(present_x) - min(present_x)) if present_x else 0.0
    y_span = (max(present_y) - min(present_y)) if present_y else 0.0
    data = []
    for i, s in enumerate(comparison["series"]):
        points = [(r["itl_p50_ms"], r["output_tok_s"], r["concurrency"]) for r in s["levels"]]
        data.append(
            {
                "type": "scatter",
                "mode": "lines+markers+text",
                "name": _name(s),
                "x": [p[0] for p in points],
                "y": [p[1] for p in points],
                "text": _spaced_labels(points, x_span, y_span),
                "textposition": _LABEL_POSITIONS[i % len(_LABEL_POSITIONS)],
                "cliponaxis": False,
                "customdata": [p[2] for p in points],
                "hovertemplate": "C=%{customdata}: %{y:.0f} tok/s at %{x:.1f} ms<extra></extra>",
                "line": {"color": _color(i)},
            }
        )
    x = {"title": {"text": "inter-token latency p50 (ms)"}, "rangemode": "tozero"}
    return {"data": data, "layout": _layout("Throughput vs latency", x, "output tok/s")}


def _decided_ratios(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    """The decision's per-level ratios (oriented: above 1 favours the candidate), each with
    its status; the verdict's throughput ratios for a comparison stored before decisions."""
    decision = verdict.get("decision")
    if not decision:
        return [{**r, "status": ""} for r in verdict["ratios"]]
    return [
        {"concurrency": lv["concurrency"], **lv["ratio"], "status": lv["status"]}
        for lv in decision["levels"]
    ]


def ratio_figure(comparison: dict[str, Any]) -> PlotlyFigure:
    """Each candidate's ratio to the reference on the deciding figure with its interval and
    status, the line at 1 and the decision's margin band."""
    data = []
    label, margin = "Throughput", None
    for i, v in enumerate(comparison["verdicts"], start=1):
        ratios = _decided_ratios(v)
        if v.get("decision"):
            label = v["decision"]["figure"]["label"]
            margin = v["decision"]["margin"]
        upper = [(r["high"] - r["point"]) if r["high"] is not None else 0 for r in ratios]
        lower = [(r["point"] - r["low"]) if r["low"] is not None else 0 for r in ratios]
        data.append({
            "type": "scatter", "mode": "lines+markers",
            "name": f"{v['candidate']} / {v['reference']}",
            "x": [r["concurrency"] for r in ratios], "y": [r["point"] for r in ratios],
            "text": [r["status"].replace("_", " ") for r in ratios],
            "error_y": {"type": "data", "array": upper, "arrayminus": lower, "visible": True},
            "line": {"color": _color(i)},
        })  # fmt: skip
    cs = _concurrencies(comparison)
    shapes: list[dict[str, Any]] = [{
        "type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
        "line": {"color": "#868e96", "dash": "dash", "width": 1},
    }]  # fmt: skip
    if margin:
        shapes.append({
            "type": "rect", "xref": "paper", "x0": 0, "x1": 1, "y0": 1 / (1 + margin),
            "y1": 1 + margin, "fillcolor": "#868e96", "opacity": 0.12, "line": {"width": 0},
        })  # fmt: skip
    layout = _layout(
        f"{label} ratio (above 1 favours the candidate) with its "
        f"{comparison['confidence']:.0%} interval; band: the margin",
        _log_c_axis(cs),
        "ratio (1 = level)",
        shapes=shapes,
    )
    layout["yaxis"]["rangemode"] = "normal"
    return {"data": data, "layout": layout}


def accept_figure(comparison: dict[str, Any]) -> PlotlyFigure:
    """Both speculative figures vs C for each speculative series: accept length per drafted
    step and tokens per engine step (dashed), and accept length per prompt category where the
    engine reported per-request figures: why speculation fades at high C."""
    data: list[dict[str, Any]] = []
    for i, s in enumerate(comparison["series"]):
        rows = s["levels"]
        if not any(r.get("accept_length") is not None for r in rows):
            continue
        xs = [r["concurrency"] for r in rows]
        data.append({
            "type": "scatter", "mode": "lines+markers",
            "name": f"{_name(s)} accept length per drafted step",
            "x": xs, "y": [r.get("accept_length") for r in rows],
            "line": {"color": _color(i)}, "legendgroup": s["label"],
        })  # fmt: skip
        if any(r.get("tokens_per_step") is not None for r in rows):
            data.append({
                "type": "scatter", "mode": "lines+markers",
                "name": f"{_name(s)} tokens per engine step",
                "x": xs, "y": [r.get("tokens_per_step") for r in rows],
                "line": {"color": _color(i), "dash": "longdash"}, "legendgroup": s["label"],
            })  # fmt: skip
        categories = sorted({c for r in rows for c in r.get("by_category") or {}})
        for j, cat in enumerate(categories):
            ys = [((r.get("by_category") or {}).get(cat) or {}).get("accept_length") for r in rows]
            if all(y is None for y in ys):
                continue
            data.append({
                "type": "scatter", "mode": "lines+markers", "name": f"{_name(s)} · {cat}",
                "x": xs, "y": ys, "legendgroup": s["label"],
                "line": {"color": _color(i), "dash": ("dot", "dash", "dashdot")[j % 3]},
            })  # fmt: skip
    layout = _layout(
        "Accept length and tokens per step vs concurrency (speculative profiles)",
        _log_c_axis(_concurrencies(comparison)),
        "tokens per drafted step / per engine step",
    )
    return {"data": data, "layout": layout}


FIGURES = (
    ("throughput", throughput_figure),
    ("accept", accept_figure),
    ("ratio", ratio_figure),
    ("ttft", ttft_figure),
    ("itl", itl_figure),
    ("pareto", pareto_figure),
)


def comparison_figures(
    comparison: dict[str, Any], *, legend_width_px: int = CARD_LEGEND_WIDTH_PX
) -> dict[str, PlotlyFigure]:
    """Every chart of the comparison page, by the id of its container."""
    return {name: legend_below(build(comparison), legend_width_px) for name, build in FIGURES}


def history_figure(history: list[HistoryPoint], profile_name: str) -> PlotlyFigure:
    xs = [h["created_at"] for h in history]
    text = [f"sweep #{h['sweep_id']}" for h in history]
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": "lowest level (C=1 when tested)",
         "x": xs, "y": [h["lowest_tok_s"] for h in history], "text": text,
         "line": {"color": COLORS[0]}},
        {"type": "scatter", "mode": "lines+markers", "name": "saturation (or peak) throughput",
         "x": xs, "y": [h["saturation"]["throughput"] for h in history], "text": text,
         "line": {"color": COLORS[1]}},
    ]  # fmt: skip
    layout = _layout(f"{profile_name}: throughput per sweep", {"type": "date"}, "output tok/s")
    return legend_below({"data": data, "layout": layout})


def schedule_figure(
    schedule: dict[str, Any], *, legend_width_px: int = CARD_LEGEND_WIDTH_PX
) -> PlotlyFigure:
    """The draft length over C as a step chart (one step per band), and each band's gain over
    its runner-up with its interval on a second axis."""
    bands = schedule["bands"]
    tested = sorted({c for band in bands for c in band["levels"]})
    xs: list[float] = []
    ys: list[int] = []
    for band in bands:
        xs.append(band["start"])
        ys.append(band["draft_length"])
    xs.append(max(tested[-1], bands[-1]["start"]))
    ys.append(bands[-1]["draft_length"])
    text = [
        f"{b['label']}: {b['variant']} (K={b['draft_length']}), C {b['start']}"
        + ("+" if b["end"] is None else f"-{b['end']}")
        for b in bands
    ]
    steps = {
        "type": "scatter", "mode": "lines", "name": "draft length (K)", "x": xs, "y": ys,
        "line": {"shape": "hv", "color": _color(0), "width": 3},
        "hovertext": [*text, text[-1]], "hoverinfo": "text",
    }  # fmt: skip
    centres = [band["levels"][len(band["levels"]) // 2] for band in bands]
    gains = [band["expected_gain"] for band in bands]
    plus = [b["gain_high"] - b["expected_gain"] if b["gain_high"] is not None else 0 for b in bands]
    minus = [b["expected_gain"] - b["gain_low"] if b["gain_low"] is not None else 0 for b in bands]
    gain = {
        "type": "scatter", "mode": "markers", "yaxis": "y2", "x": centres, "y": gains,
        "name": f"gain over the runner-up ({schedule['confidence']:.0%} interval)",
        "marker": {"color": _color(1), "size": 9},
        "error_y": {"type": "data", "symmetric": False, "array": plus, "arrayminus": minus},
        "hovertext": text, "hoverinfo": "text+y",
    }  # fmt: skip
    layout = _layout(
        "Speculation schedule: draft length vs concurrency",
        _log_c_axis(tested),
        "draft tokens per step (0 = off)",
        yaxis2={"title": {"text": "gain (x runner-up)"}, "overlaying": "y", "side": "right"},
    )
    layout["margin"] = {**_MARGIN, "r": 64}
    return legend_below({"data": [steps, gain], "layout": layout}, legend_width_px)
