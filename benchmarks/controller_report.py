"""Controller tracking on the sweep and experiment pages: per level, the per-second series a
level stored (``summary["controller"]``, benchlib.stats.controller.controller_figures) of each
run on the same workload, drawn in one Plotly figure with the switches marked, and the
switches with their cost as table rows. Built from the stored figures only (no ORM, no
recompute from records)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict

from benchlib.json_types import JsonObject, PlotlyFigure

_COLORS = ("#1c7ed6", "#f08c00", "#2b8a3e", "#7048e8", "#c92a2a", "#495057")
SOURCE_TEXT = {
    "sglang_gauges": "SGLang gauges: spec_num_steps (tier), spec_accept_length, "
    "spec_accept_rate, gen_throughput (recent-window figures)",
    "vllm_counters": "vLLM counters differenced per second: spec_decode drafts, draft and "
    "accepted tokens, generation tokens",
}


@dataclass(frozen=True)
class Track:
    """One run's stored controller figures at one level."""

    label: str
    figures: Mapping[str, Any]


@dataclass
class LevelTracks:
    """Every tracked run at one level (the arms of an experiment, or one sweep's level)."""

    key: int
    title: str
    tracks: list[Track] = field(default_factory=list)

    def switch_rows(self) -> list[dict[str, Any]]:
        """The switches of every track, in time order, as table rows."""
        rows = [
            {"label": t.label, **s}
            for t in self.tracks
            for s in t.figures.get("switches") or ()
            if isinstance(s, Mapping)
        ]
        return sorted(rows, key=lambda r: (float(r.get("t_s") or 0.0), r["label"]))

    def sources(self) -> list[str]:
        return sorted({SOURCE_TEXT.get(str(t.figures.get("source")), "") for t in self.tracks})


def _series(figures: Mapping[str, Any], name: str) -> list[Any]:
    series = figures.get("series") or {}
    values = series.get(name) if isinstance(series, Mapping) else None
    return list(values) if isinstance(values, list) else []


def level_figure(level: LevelTracks) -> PlotlyFigure:
    """Throughput per second of each run (left axis) and its drafted tokens per step, tokens
    per step and acceptance (right axis), with each switch as a dashed line and a marker whose
    hover gives its cost."""
    # Traces and shapes as Plotly's schema has them (``PlotlyFigure``): plain JSON.
    data: list[JsonObject] = []
    shapes: list[JsonObject] = []
    for i, track in enumerate(level.tracks):
        color = _COLORS[i % len(_COLORS)]
        t = _series(track.figures, "t_s")
        common = {"type": "scatter", "x": t, "legendgroup": track.label}
        data.append({
            **common, "mode": "lines+markers", "name": f"{track.label}: tok/s",
            "y": _series(track.figures, "throughput"), "line": {"color": color, "width": 2},
            "hovertemplate": "%{x:.0f} s: %{y:.0f} tok/s<extra>" + track.label + "</extra>",
        })  # fmt: skip
        data.append({
            **common, "mode": "lines", "name": f"{track.label}: drafted/step", "yaxis": "y2",
            "y": _series(track.figures, "drafted_per_step"), "line": {"color": color,
            "dash": "dash", "shape": "hv"}, "connectgaps": False,
        })  # fmt: skip
        data.append({
            **common, "mode": "lines", "name": f"{track.label}: tokens/step", "yaxis": "y2",
            "y": _series(track.figures, "tokens_per_step"), "visible": "legendonly",
            "line": {"color": color, "dash": "dot"},
        })  # fmt: skip
        data.append({
            **common, "mode": "lines", "name": f"{track.label}: acceptance", "yaxis": "y2",
            "y": _series(track.figures, "acceptance"), "visible": "legendonly",
            "line": {"color": color, "dash": "dashdot"}, "connectgaps": False,
        })  # fmt: skip
        switches = [s for s in track.figures.get("switches") or () if isinstance(s, Mapping)]
        if not switches:
            continue
        for s in switches:
            shapes.append({
                "type": "line", "xref": "x", "yref": "paper", "x0": s["t_s"], "x1": s["t_s"],
                "y0": 0, "y1": 1, "line": {"color": color, "dash": "dot", "width": 1},
            })  # fmt: skip
        data.append({
            **common, "mode": "markers", "name": f"{track.label}: switch", "yaxis": "y2",
            "x": [s["t_s"] for s in switches], "y": [s["after"] for s in switches],
            "text": [switch_text(s) for s in switches],
            "hovertemplate": "%{text}<extra>" + track.label + "</extra>",
            "marker": {"symbol": "x", "size": 11, "color": color},
        })  # fmt: skip
    layout = {
        "title": {"text": level.title, "font": {"size": 14}},
        "margin": {"l": 64, "r": 64, "t": 40, "b": 48},
        "xaxis": {"title": {"text": "seconds since the level opened"}},
        "yaxis": {"title": {"text": "output tok/s (server)"}, "rangemode": "tozero"},
        # Draft lengths are whole numbers: whole ticks, not ones aligned to the left axis.
        "yaxis2": {"title": {"text": "drafted tokens per step"}, "overlaying": "y",
                   "side": "right", "rangemode": "tozero", "dtick": 1, "showgrid": False},
        "legend": {"orientation": "h", "y": -0.2},
        "shapes": shapes,
    }  # fmt: skip
    return {"data": data, "layout": layout}


def _change(row: Mapping[str, Any]) -> str:
    change = row.get("throughput_change")
    return f"{change:+.1%}" if isinstance(change, int | float) else ""


def _fmt(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, int | float) else "n/a"


def switch_text(s: Mapping[str, Any]) -> str:
    """One switch and its cost in words (the chart's hover, the table's summary)."""
    text = (
        f"{_fmt(s.get('before'), 'g')} -> {_fmt(s.get('after'), 'g')} drafted/step at "
        f"{_fmt(s.get('t_s'), '.1f')} s: throughput {_fmt(s.get('throughput_before'), '.0f')} "
        f"-> {_fmt(s.get('throughput_after'), '.0f')} tok/s"
    )
    change = s.get("throughput_change")
    if isinstance(change, int | float):
        text += f" ({change:+.1%})"
    drop = s.get("acceptance_drop")
    if isinstance(drop, int | float):
        text += f", acceptance {_fmt(s.get('acceptance_before'), '.2f')} -> "
        text += f"{_fmt(s.get('acceptance_after'), '.2f')}"
    episode = s.get("episode_s")
    if isinstance(episode, list) and len(episode) == 2:
        # No whole second lies between these switches: the cost is the episode's.
        text += (
            f"; one of {s.get('episode_switches')} switches from {_fmt(episode[0], '.1f')} to "
            f"{_fmt(episode[1], '.1f')} s, costed together"
        )
    return text


class ControllerSection(TypedDict):
    """One level's section of the controller tracking block (``tracks_context``)."""

    key: int
    figure_id: str  # the json_script id of its figure
    title: str
    labels: list[str]
    figure: PlotlyFigure
    switches: list[JsonObject]  # a stored switch with its run's label and its sentences
    sources: list[str]
    failed_scrapes: int


def level_tracks(runs: Sequence[tuple[str, int, str, Any]]) -> list[LevelTracks]:
    """Group ``(label, level key, level title, stored controller figures)`` by level key (a
    sweep's level index, an experiment's concurrency), in key order, keeping the runs that
    have figures."""
    levels: dict[int, LevelTracks] = {}
    for label, key, title, figures in runs:
        if not isinstance(figures, Mapping) or not figures.get("series"):
            continue
        levels.setdefault(key, LevelTracks(key, title)).tracks.append(Track(label, figures))
    return [levels[k] for k in sorted(levels)]


def tracks_context(
    runs: Sequence[tuple[str, int, str, Any]], *, scope: str
) -> list[ControllerSection]:
    """What the page's section renders per level: the figure (its json_script id prefixed
    with ``scope``), the switch rows, the sources."""
    return [
        {
            "key": level.key,
            "figure_id": f"controller-figure-{scope}-{level.key}",
            "title": level.title,
            "labels": [t.label for t in level.tracks],
            "figure": level_figure(level),
            "switches": [
                {**row, "text": switch_text(row), "change_text": _change(row)}
                for row in level.switch_rows()
            ],
            "sources": level.sources(),
            "failed_scrapes": sum(int(t.figures.get("failed_scrapes") or 0) for t in level.tracks),
        }
        for level in level_tracks(runs)
    ]
