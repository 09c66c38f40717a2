"""What every server-built chart shares: its colours, and where its legend goes and how much
room it takes: under the x axis's title, in the figure's own bottom margin, its long entries
wrapped (``legend_below``). The comparison's, the history's, the ramps' and the schedule's
figures go through it, and static/specdash/charts.js fits the margin to the rows the legend
really took.

Apart from the comparison's figures (experiments/figures.py) because the workload phases'
ramp chart (phases.py), which the sweep page draws too, takes the same colours and legend:
both import it from here, below them, rather than the phases from the experiments.
"""

from __future__ import annotations

from benchlib.json_types import PlotlyFigure

# One colour per series, in order (the comparison's arms, a ramp chart's series); the report
# hands the same list to Plotly as its colorway.
COLORS = ("#2f6fdb", "#d9480f", "#2b8a3e", "#7048e8", "#c2255c", "#0b7285", "#e67700", "#495057")

# A chart's margins (experiments/figures.py's, and a figure's without its own) before its
# legend's rows and its title's lines are added.
MARGIN = {"l": 64, "r": 20, "t": 40, "b": 48}

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
    margin = dict(layout.get("margin") or MARGIN)
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
