"""A comparison as files: the per-level table as CSV, and one self-contained HTML report.

The report inlines Plotly's JavaScript once (``plotly.io.to_html(include_plotlyjs=True)`` on
the first chart, the others reuse it), so it opens offline and can be attached to a ticket.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import plotly.io as pio
from django.template.loader import render_to_string

from benchlib.json_types import JsonObject, PlotlyFigure
from benchmarks.charts import COLORS, REPORT_LEGEND_WIDTH_PX
from benchmarks.experiments.figures import comparison_figures, schedule_figure
from benchmarks.phases import comparison_phases

if TYPE_CHECKING:
    from benchmarks.experiments.comparison import Comparison
    from benchmarks.experiments.schedule import ScheduleReport

FIGURES_IN_REPORT = ("throughput", "accept", "ratio", "ttft", "itl", "pareto")
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
# The dashboard's look (static/specdash/app.css) for the report's charts: without a template
# of its own, plotly.io.to_html applies Python Plotly's default one (grey plot area, white
# grid), which the page's charts (plotly.js, no template) never show.
APP_TEMPLATE: JsonObject = {
    "layout": {
        "font": {"family": "system-ui, sans-serif", "color": "#1d2330", "size": 12},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "colorway": list(COLORS),
        "xaxis": {"gridcolor": "#e2e5ea", "linecolor": "#c8cdd6", "zerolinecolor": "#c8cdd6"},
        "yaxis": {"gridcolor": "#e2e5ea", "linecolor": "#c8cdd6", "zerolinecolor": "#c8cdd6"},
        "hoverlabel": {"font": {"family": "system-ui, sans-serif"}},
    }
}


# A pair's columns per level: the decision's oriented ratio, its status and its sentence
# (benchlib/stats/decision.py), the same words the page prints.
RATIO_COLUMNS = ("point", "low", "high", "method", "status", "sentence")


def _fmt(value: Any) -> Any:
    return "" if value is None else value


class ReportContext(TypedDict):
    """What a report shows beside the comparison: the kept audit outcome (none where never
    audited) and, for an experiment, its speculation schedule."""

    audit: Mapping[str, object] | None
    schedule: NotRequired[ScheduleReport]


def comparison_csv(comparison: Comparison) -> str:
    """One row per concurrency: each profile's figures, then each candidate's ratio to A with
    the decision's status and statement for that level."""
    series = comparison["series"]
    verdicts = comparison["verdicts"]
    figures = ("runs", "requests_ok", "requests_failed", "output_tok_s", "steady_output_tok_s",
               "ttft_p50_ms", "itl_p50_ms",
               "e2e_p50_ms", "accept_length", "accept_length_source", "tokens_per_step",
               "tokens_per_step_source", "acceptance_rate", "acceptance_rate_source",
               "server_accept_length", "request_accept_length", "goodput_tok_s",
               "goodput_req_s", "goodput_share", "meets_slo")  # fmt: skip
    header = ["concurrency"]
    for s in series:
        header += [f"{s['label']}_{name}" for name in figures]
    for v in verdicts:
        pair = f"{v['candidate']}/{v['reference']}"
        header += [f"{pair}_ratio", f"{pair}_low", f"{pair}_high", f"{pair}_method",
                   f"{pair}_status", f"{pair}_statement"]  # fmt: skip
    for v in comparison.get("goodput_verdicts") or []:
        pair = f"{v['candidate']}/{v['reference']}"
        header += [f"{pair}_goodput_ratio", f"{pair}_goodput_low", f"{pair}_goodput_high",
                   f"{pair}_goodput_status", f"{pair}_goodput_statement"]  # fmt: skip
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    for row in comparison["rows"]:
        line: list[Any] = [row["concurrency"]]
        for cell in row["cells"]:
            line += [_fmt(cell.get(name)) for name in figures]
        for ratio in row["ratios"]:
            line += [_fmt(ratio.get(k)) for k in RATIO_COLUMNS]
        for ratio in row.get("goodput_ratios") or []:
            line += [_fmt(ratio.get(k)) for k in ("point", "low", "high", "status", "sentence")]
        writer.writerow(line)
    return out.getvalue()


def _chart_html(figures: dict[str, PlotlyFigure], names: tuple[str, ...]) -> list[str]:
    charts = []
    for i, name in enumerate(names):
        figure = figures[name]
        styled = {**figure, "layout": {**figure["layout"], "template": APP_TEMPLATE}}
        charts.append(
            pio.to_html(
                styled,
                include_plotlyjs=(i == 0),
                full_html=False,
                config=PLOTLY_CONFIG,
                default_height=f"{figure['layout'].get('height', 380)}px",
                div_id=f"chart-{name}",
            )
        )
    return charts


def comparison_report_html(
    comparison: Comparison, *, title: str, context: ReportContext | None = None
) -> str:
    """The whole comparison as one HTML document (charts, verdict, table, what was run with
    each server's launch and environment) and, with ``context["schedule"]`` available, the
    speculation schedule with each engine's configuration."""
    phases = comparison_phases(comparison)
    # The report's charts span its page: legend rows estimated at that width.
    figures = (
        comparison_figures(comparison, legend_width_px=REPORT_LEGEND_WIDTH_PX)
        | phases["ramp_figures"]
    )
    # The ramp charts (one per ramped C) follow the comparison's own charts.
    shown: tuple[str, ...] = (*FIGURES_IN_REPORT, *phases["ramp_figures"])
    names = shown
    schedule = context.get("schedule") if context else None
    if schedule and schedule.get("available"):
        figures["schedule"] = schedule_figure(schedule, legend_width_px=REPORT_LEGEND_WIDTH_PX)
        names = (*names, "schedule")
    charts = _chart_html(figures, names)
    page: dict[str, object] = {
        "title": title,
        "comparison": comparison,
        "phases": phases,
        "charts": charts[: len(shown)],
        "schedule_chart": charts[-1] if "schedule" in names else "",
    }
    page.update(context or {})
    return render_to_string("benchmarks/comparison_report.html", page)
