"""Plotly figures of a comparison, built once as plain dicts.

The comparison page hands them to ``Plotly.newPlot`` as they are (static/specdash/
comparison.js adds the PNG/SVG export buttons), and the HTML report renders the same dicts
with ``plotly.io.to_html``: one definition, two outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from benchlib.json_types import JsonObject, PlotlyFigure
from benchmarks.charts import CARD_LEGEND_WIDTH_PX, COLORS, MARGIN, legend_below

if TYPE_CHECKING:
    from benchmarks.experiments.comparison import Comparison, SeriesEntry
    from benchmarks.experiments.history import HistoryPoint
    from benchmarks.experiments.schedule import ScheduleReport
    from benchmarks.experiments.verdicts import VerdictEntry


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _name(series: SeriesEntry) -> str:
    return f"{series['label']}: {series['name']}"


def _log_c_axis(concurrencies: list[int]) -> JsonObject:
    return {"type": "log", "title": {"text": "concurrency (C)"}, "tickvals": concurrencies}


def _line(
    name: str,
    x: list[Any],
    y: list[Any],
    color: int,
    *,
    dash: str | None = None,
    legendgroup: str | None = None,
) -> JsonObject:
    """A series' curve against C, as every chart here but the ratio and the Pareto draws it."""
    line: JsonObject = {"color": _color(color)}
    if dash is not None:
        line["dash"] = dash
    trace: JsonObject = {
        "type": "scatter", "mode": "lines+markers", "name": name, "x": x, "y": y, "line": line
    }  # fmt: skip
    if legendgroup is not None:
        trace["legendgroup"] = legendgroup
    return trace


def _concurrencies(comparison: Comparison) -> list[int]:
    return sorted({r["concurrency"] for s in comparison["series"] for r in s["levels"]})


# A chart's axes, traces and shapes follow Plotly's own schema (plotly.js's
# plot-schema.json), as ``PlotlyFigure`` says: plain JSON here.
def _layout(
    title: str, x: JsonObject, y_title: str, *, y_rangemode: str = "tozero", **extra: object
) -> JsonObject:
    return {
        "title": {"text": title, "font": {"size": 14}},
        "margin": MARGIN,
        "xaxis": x,
        "yaxis": {"title": {"text": y_title}, "rangemode": y_rangemode},
        **extra,
    }


def throughput_figure(comparison: Comparison) -> PlotlyFigure:
    data = []
    for i, s in enumerate(comparison["series"]):
        xs = [r["concurrency"] for r in s["levels"]]
        whole = [r["output_tok_s"] for r in s["levels"]]
        steady = [r["steady_output_tok_s"] for r in s["levels"]]
        group = s["label"]
        data.append(_line(f"{_name(s)} (whole level)", xs, whole, i, legendgroup=group))
        data.append(
            _line(f"{_name(s)} (steady window)", xs, steady, i, dash="dot", legendgroup=group)
        )
    layout = _layout(
        "Output throughput vs concurrency",
        _log_c_axis(_concurrencies(comparison)),
        "output tok/s",
    )
    return {"data": data, "layout": layout}


def _metric_figure(comparison: Comparison, metric: str, title: str, unit: str) -> PlotlyFigure:
    data = [
        _line(
            _name(s), [r["concurrency"] for r in s["levels"]], [r[metric] for r in s["levels"]], i
        )
        for i, s in enumerate(comparison["series"])
    ]
    return {"data": data, "layout": _layout(title, _log_c_axis(_concurrencies(comparison)), unit)}


def ttft_figure(comparison: Comparison) -> PlotlyFigure:
    return _metric_figure(
        comparison, "ttft_p50_ms", "Time to first token (p50) vs concurrency", "ms"
    )


def itl_figure(comparison: Comparison) -> PlotlyFigure:
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


def pareto_figure(comparison: Comparison) -> PlotlyFigure:
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
    x: JsonObject = {"title": {"text": "inter-token latency p50 (ms)"}, "rangemode": "tozero"}
    return {"data": data, "layout": _layout("Throughput vs latency", x, "output tok/s")}


class RatioPoint(TypedDict):
    """A point of the ratio chart: one level's ratio with its interval and status."""

    concurrency: int
    point: float
    low: float | None
    high: float | None
    status: str


def _decision(verdict: VerdictEntry) -> Mapping[str, Any]:
    # As Decision.to_dict writes it (benchlib.stats.decision declares no narrower type).
    return verdict.get("decision") or {}


def _decided_ratios(verdict: VerdictEntry) -> list[RatioPoint]:
    """The decision's per-level ratios (oriented: above 1 favours the candidate), each with
    its status; the verdict's throughput ratios for a comparison stored before decisions."""
    decision = _decision(verdict)
    if not decision:
        return [
            {"concurrency": r["concurrency"], "point": r["point"], "low": r["low"],
             "high": r["high"], "status": ""}
            for r in verdict["ratios"]
        ]  # fmt: skip
    return [
        {"concurrency": lv["concurrency"], "point": lv["ratio"]["point"],
         "low": lv["ratio"]["low"], "high": lv["ratio"]["high"], "status": lv["status"]}
        for lv in decision["levels"]
    ]  # fmt: skip


def ratio_figure(comparison: Comparison) -> PlotlyFigure:
    """Each candidate's ratio to the reference on the deciding figure with its interval and
    status, the line at 1 and the decision's margin band."""
    data = []
    label, margin = "Throughput", None
    for i, v in enumerate(comparison["verdicts"], start=1):
        ratios = _decided_ratios(v)
        decision = _decision(v)
        if decision:
            label = decision["figure"]["label"]
            margin = decision["margin"]
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
    shapes: list[JsonObject] = [{
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
        y_rangemode="normal",
        shapes=shapes,
    )
    return {"data": data, "layout": layout}


def accept_figure(comparison: Comparison) -> PlotlyFigure:
    """Both speculative figures vs C for each speculative series: accept length per drafted
    step and tokens per engine step (dashed), and accept length per prompt category where the
    engine reported per-request figures: why speculation fades at high C."""
    data: list[JsonObject] = []
    for i, s in enumerate(comparison["series"]):
        rows = s["levels"]
        if not any(r.get("accept_length") is not None for r in rows):
            continue
        xs = [r["concurrency"] for r in rows]
        group = s["label"]
        accept = [r.get("accept_length") for r in rows]
        data.append(
            _line(f"{_name(s)} accept length per drafted step", xs, accept, i, legendgroup=group)
        )
        if any(r.get("tokens_per_step") is not None for r in rows):
            per_step = [r.get("tokens_per_step") for r in rows]
            name = f"{_name(s)} tokens per engine step"
            data.append(_line(name, xs, per_step, i, dash="longdash", legendgroup=group))
        categories = sorted({c for r in rows for c in r.get("by_category") or {}})
        for j, cat in enumerate(categories):
            ys = [((r.get("by_category") or {}).get(cat) or {}).get("accept_length") for r in rows]
            if all(y is None for y in ys):
                continue
            dash = ("dot", "dash", "dashdot")[j % 3]
            data.append(_line(f"{_name(s)} · {cat}", xs, ys, i, dash=dash, legendgroup=group))
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
    comparison: Comparison, *, legend_width_px: int = CARD_LEGEND_WIDTH_PX
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
    schedule: ScheduleReport, *, legend_width_px: int = CARD_LEGEND_WIDTH_PX
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
    layout["margin"] = {**MARGIN, "r": 64}
    return legend_below({"data": [steps, gain], "layout": layout}, legend_width_px)
