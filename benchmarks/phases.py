"""What the pages show of a level's workload phases, from its stored summary (no ORM, no
records read): reasoning-phase first-token times, token gaps and tokens per chunk, figures per
turn and per session of a multi-turn level, and a ramped level's figures per time slice with
its chart.

The load generator computed these once from the records (benchlib.loadgen.reasoning,
sessions, ramp) and the recorder stored them in ``SweepLevel.summary``; the sweep page reads
one summary per level, the comparison the summaries of a level's repeats, averaged here the
way the comparison averages its other figures (the mean over repeats of each figure). A level
whose summary has none of them (a plain level) gives nothing, and its page shows no block.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

from benchlib.json_types import JsonObject, PlotlyFigure
from benchmarks.charts import COLORS, legend_below

# The reasoning figures a page shows: (summary key, quantile) -> the row's key.
REASONING_SHOWN = (
    ("ttft_reasoning_ms", "p50"),
    ("ttft_reasoning_ms", "p99"),
    ("ttft_answer_ms", "p50"),
    ("ttft_answer_ms", "p99"),
    ("itl_reasoning_ms", "p50"),
    ("itl_answer_ms", "p50"),
    ("reasoning_tokens", "mean"),
)
TURN_SHOWN = ("prompt_tokens_mean", "ttft_p50_ms", "ttft_p99_ms")
SLICE_SHOWN = (
    "offered_rate",
    "arrival_rate",
    "output_tok_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_p50_ms",
)


# A row of figures whose keys are generated from a SHOWN tuple (a reasoning row, a turn row, a
# ramp's slice): counts and figures, None where no repeat had the figure.
FigureRow = dict[str, float | None]


class SessionRow(TypedDict):
    """A level's multi-turn sessions (``session_row``): counts summed over repeats, the rest
    averaged."""

    sessions: int
    complete: int
    turns_mean: float | None
    duration_p50_s: float | None
    duration_max_s: float | None
    later_over_first_p50: float | None
    later_over_first_mean: float | None


class RampRow(TypedDict):
    """A ramped level's strategy, rates and slices (``ramp_row``); a slice's keys are ``t0_s``,
    ``t1_s``, ``arrivals`` and each of SLICE_SHOWN."""

    strategy: str | None
    start_rate: float | None
    end_rate: float | None
    repeats: int
    slices: list[FigureRow]


class PhasesRow(TypedDict):
    """Every phase block of one level (``phases_row``)."""

    reasoning: FigureRow | None
    turns: list[FigureRow]
    sessions: SessionRow | None
    ramp: RampRow | None


class PhaseBlocks(TypedDict):
    """What a page shows of its levels' phases (``comparison_phases``, and the sweep page's
    selector): each block's rows as the templates read them, and the ramp charts by the id of
    their container."""

    reasoning: list[JsonObject]
    sessions: list[JsonObject]
    ramps: list[JsonObject]
    ramp_figures: dict[str, PlotlyFigure]


def _mean(values: Sequence[Any]) -> float | None:
    present = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return statistics.fmean(present) if present else None


def _dig(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, Mapping):
            return None
        data = data.get(key)
    return data


def reasoning_row(summaries: Sequence[Mapping[str, Any]]) -> FigureRow | None:
    """The level's reasoning-phase figures (ms; the mean over repeats of each), or None when
    no repeat streamed reasoning. Keys: ``requests`` and ``answered`` (summed),
    ``<figure>_<quantile>`` for each of REASONING_SHOWN, and where the summaries have them
    ``accept_reasoning`` / ``accept_answer`` (tokens per chunk in each phase, the mean over
    repeats like the other figures) with ``accept_reasoning_chunks`` / ``accept_answer_chunks``
    (the chunks behind them, summed) and ``accept_reasoning_per_delivery`` /
    ``accept_answer_per_delivery`` (tokens per delivery, averaged)."""
    found = [s["reasoning"] for s in summaries if isinstance(s.get("reasoning"), Mapping)]
    if not found:
        return None
    row: FigureRow = {
        "requests": sum(int(f.get("requests") or 0) for f in found),
        "answered": sum(int(f.get("answered") or 0) for f in found),
    }
    for name, q in REASONING_SHOWN:
        row[f"{name.removesuffix('_ms')}_{q}"] = _mean([_dig(f, name, q) for f in found])
    # Tokens per chunk per phase, where the level kept them: a row built from summaries stored
    # before then stays as it was (so a comparison stored then still audits clean).
    if any(isinstance(f.get("accept_reasoning"), Mapping) for f in found):
        for phase in ("accept_reasoning", "accept_answer"):
            row[phase] = _mean([_dig(f, phase, "tokens_per_chunk") for f in found])
            row[f"{phase}_chunks"] = sum(int(_dig(f, phase, "chunks") or 0) for f in found)
            row[f"{phase}_per_delivery"] = _mean(
                [_dig(f, phase, "tokens_per_delivery") for f in found]
            )
    return row


def turn_rows(summaries: Sequence[Mapping[str, Any]]) -> list[FigureRow]:
    """Per turn index (0: first): requests and ok summed over repeats, TURN_SHOWN averaged."""
    by_turn: dict[int, list[Mapping[str, Any]]] = {}
    for summary in summaries:
        for row in summary.get("turns") or []:
            if isinstance(row, Mapping) and isinstance(row.get("turn"), int):
                by_turn.setdefault(row["turn"], []).append(row)
    out = []
    for turn in sorted(by_turn):
        rows = by_turn[turn]
        entry: FigureRow = {
            "turn": turn,
            "requests": sum(int(r.get("requests") or 0) for r in rows),
            "ok": sum(int(r.get("ok") or 0) for r in rows),
        }
        for name in TURN_SHOWN:
            entry[name] = _mean([r.get(name) for r in rows])
        out.append(entry)
    return out


def session_row(summaries: Sequence[Mapping[str, Any]]) -> SessionRow | None:
    """The level's sessions: counted over repeats, their turns, length (s) and later turns'
    mean TTFT over the first's (p50 and mean over sessions) averaged over repeats."""
    found = [s["sessions"] for s in summaries if isinstance(s.get("sessions"), Mapping)]
    if not found:
        return None
    return {
        "sessions": sum(int(f.get("sessions") or 0) for f in found),
        "complete": sum(int(f.get("complete") or 0) for f in found),
        "turns_mean": _mean([_dig(f, "turns", "mean") for f in found]),
        "duration_p50_s": _mean([_dig(f, "duration_s", "p50") for f in found]),
        "duration_max_s": _mean([_dig(f, "duration_s", "max") for f in found]),
        "later_over_first_p50": _mean([_dig(f, "later_over_first_ttft", "p50") for f in found]),
        "later_over_first_mean": _mean([_dig(f, "later_over_first_ttft", "mean") for f in found]),
    }


def ramp_row(summaries: Sequence[Mapping[str, Any]]) -> RampRow | None:
    """A ramped level's strategy, rates and slices (each of SLICE_SHOWN the mean over the
    repeats cut into as many slices as the first), or None for a level without a ramp."""
    found = [s["ramp"] for s in summaries if isinstance(_dig(s, "ramp", "slices"), list)]
    if not found:
        return None
    first = found[0]
    same = [f["slices"] for f in found if len(f["slices"]) == len(first["slices"])]
    slices = []
    for k, base in enumerate(first["slices"]):
        entry = {"t0_s": base.get("t0_s"), "t1_s": base.get("t1_s")}
        entry["arrivals"] = sum(int(s[k].get("arrivals") or 0) for s in same)
        for name in SLICE_SHOWN:
            entry[name] = _mean([s[k].get(name) for s in same])
        slices.append(entry)
    return {
        "strategy": first.get("strategy"),
        "start_rate": first.get("start_rate"),
        "end_rate": first.get("end_rate"),
        "repeats": len(same),
        "slices": slices,
    }


def phases_row(summaries: Sequence[Mapping[str, Any]]) -> PhasesRow:
    """Every phase block of one level (its repeats' summaries), under the keys the pages read:
    ``reasoning``, ``turns``, ``sessions``, ``ramp`` (None or empty where it does not apply)."""
    return {
        "reasoning": reasoning_row(summaries),
        "turns": turn_rows(summaries),
        "sessions": session_row(summaries),
        "ramp": ramp_row(summaries),
    }


def _middle(row: Mapping[str, Any]) -> float | None:
    lo, hi = row.get("t0_s"), row.get("t1_s")
    if isinstance(lo, int | float) and isinstance(hi, int | float):
        return (lo + hi) / 2
    return None


def _slice_trace(
    slices: Sequence[Mapping[str, Any]], key: str, name: str, axis: str, color: str, dash: str
) -> JsonObject:
    return {
        "type": "scatter", "mode": "lines+markers", "name": name,
        "x": [_middle(s) for s in slices], "y": [s.get(key) for s in slices], "yaxis": axis,
        "line": {"color": color, "dash": dash},
    }  # fmt: skip


# A ramp chart's traces: (slice figure, legend label, axis, line dash).
RAMP_TRACES = (
    ("offered_rate", "offered req/s", "y", "dash"),
    ("arrival_rate", "arrived req/s", "y", "solid"),
    ("output_tok_s", "output tok/s", "y2", "dot"),
    ("ttft_p50_ms", "TTFT p50 ms", "y3", "solid"),
    ("tpot_p50_ms", "TPOT p50 ms", "y3", "dashdot"),
)


def ramp_figure(title: str, series: Sequence[tuple[str, Mapping[str, Any]]]) -> PlotlyFigure:
    """A ramp chart: per time slice (its middle, s from the level's first arrival) the rate
    offered and the rate that arrived (req/s) with the output tok/s delivered on the upper
    panel, TTFT p50 and TPOT p50 (ms) on the lower; one colour per series (name, ramp row),
    whose name prefixes its traces' when there are several."""
    # Traces as Plotly's schema has them (``PlotlyFigure``): plain JSON.
    data: list[JsonObject] = []
    for i, (name, ramp) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        prefix = f"{name}: " if len(series) > 1 else ""
        slices = ramp.get("slices") or []
        data += [
            _slice_trace(slices, key, prefix + label, axis, color, dash)
            for key, label, axis, dash in RAMP_TRACES
        ]
    layout = {
        "title": {"text": title, "font": {"size": 14}},
        "margin": {"l": 64, "r": 64, "t": 40, "b": 48},
        "xaxis": {"title": {"text": "time into the level (s, slice middles)"}, "anchor": "y3"},
        "yaxis": {"title": {"text": "req/s"}, "domain": [0.55, 1.0], "rangemode": "tozero"},
        "yaxis2": {"title": {"text": "output tok/s"}, "overlaying": "y", "side": "right",
                   "rangemode": "tozero"},
        "yaxis3": {"title": {"text": "ms"}, "domain": [0.0, 0.42], "rangemode": "tozero"},
    }  # fmt: skip
    figure = legend_below({"data": data, "layout": layout})
    # Two panels: more than one chart's plot height, so neither is squeezed.
    figure["layout"]["height"] += 200
    return figure


def comparison_phases(comparison: Mapping[str, Any]) -> PhaseBlocks:
    """A comparison's phase blocks, from the rows it stored (each cell one series at one C,
    its repeats averaged by ``phases_row`` when it was built): ``reasoning`` and ``sessions``
    rows labelled with C and the series, ``ramps`` (C and the id of its chart's container) and
    ``ramp_figures`` (every series of one C on one chart). Empty for a comparison of plain
    levels, or one stored before these figures were kept."""
    names = {s.get("label"): s.get("name") for s in comparison.get("series") or []}
    reasoning, sessions, ramps = [], [], []
    figures: dict[str, PlotlyFigure] = {}
    for row in comparison.get("rows") or []:
        concurrency = row.get("concurrency")
        ramped: list[tuple[str, Mapping[str, Any]]] = []
        for cell in row.get("cells") or []:
            base = {"concurrency": concurrency, "label": cell.get("label")}
            base["name"] = names.get(cell.get("label"))
            if isinstance(cell.get("reasoning"), Mapping):
                reasoning.append(base | cell["reasoning"])
            if cell.get("turns") or isinstance(cell.get("sessions"), Mapping):
                sessions.append(
                    base | {"turns": cell.get("turns") or [], "sessions": cell.get("sessions")}
                )
            if isinstance(cell.get("ramp"), Mapping):
                ramped.append((f"{cell.get('label')}: {base['name']}", cell["ramp"]))
        if ramped:
            name = f"ramp-c{concurrency}"
            ramps.append({"concurrency": concurrency, "chart": name})
            figures[name] = ramp_figure(f"C={concurrency}: rate ramp per time slice", ramped)
    return {"reasoning": reasoning, "sessions": sessions, "ramps": ramps, "ramp_figures": figures}
