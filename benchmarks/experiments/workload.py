"""What a comparison adds about the workload: acceptance per level (and per prompt category)
and goodput under the experiment's SLOs (no ORM here, like comparison.py).

Acceptance per level: both speculative figures, accept length per drafted step and tokens per
engine step, each with its source: the server's own figure for exactly that level
(``server_metrics``, /metrics counter differences) where it was scraped, else the per-request
figures the engine reported (the level summary's ``acceptance``), and those before a server
gauge, whose window is not the level; per category always from the requests.

Goodput: each level's ``goodput_tok_s`` (load-generator summary) is the figure shown and the
point estimate of the ratio, so the ratio is the row's two figures divided. Its interval comes
from the repeats when both sides have two or more, else from batch means over time windows of
that level's requests (benchlib.stats), where a request that missed the SLO delivers no tokens.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from benchlib.arrays.columns import GAP_FIGURES, RequestArrays
from benchlib.json_types import JsonObject
from benchlib.loadgen.goodput import Slo, request_meets
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.summary import LevelGoodput
from benchlib.stats import Curve, LevelSample, RequestPoint
from benchmarks.sweeps.recordfile import read_record_columns_once, read_record_file_once
from benchmarks.sweeps.workload import figure_at

if TYPE_CHECKING:
    from benchmarks.experiments.level_rows import LevelRow
    from benchmarks.experiments.level_runs import LevelRun

GOODPUT_METRIC = "goodput_tok_s"
# Records are written with epoch times; any anchor reads them back on a consistent clock.
_EPOCH = ClockAnchor(t0_wall=0.0, t0_perf=0.0)


def _mean(values: Sequence[Any]) -> float | None:
    present = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return statistics.fmean(present) if present else None


# What each speculative figure's source means, as a comparison shows it (docs/measurement.md).
SPEC_SOURCES = {
    "counters": "server counters over the level: 1 + accepted / drafts",
    "verify_counters": "server counters over the level: (generated - requests) / verify calls",
    "itl_counters": "server counters over the level: (generated - requests) / ITL samples",
    "gauge": "server gauge: its own window (SGLang: last 40 decode passes), not the level",
    "requests": "the engine's per-request figures, summed over the level's requests",
    "mixed": "sources differ between repeats",
    "not_determinable": "not determinable: an adaptive schedule's 0-step tiers count as verify "
    "calls, so the counters give tokens per engine step only",
}


class CategoryAcceptance(TypedDict):
    """One prompt category's acceptance at a level (``acceptance_row``'s ``by_category``)."""

    requests: int
    accept_length: float | None
    acceptance_rate: float | None


class AcceptanceRow(TypedDict):
    """``acceptance_row``: a level's speculative figures (None where no source gave one), each
    with its source (a ``SPEC_SOURCES`` key) and that source's sentence."""

    accept_length_source_text: str
    tokens_per_step_source_text: str
    acceptance_rate_source_text: str
    accept_length: float | None
    accept_length_source: str | None
    tokens_per_step: float | None
    tokens_per_step_source: str | None
    acceptance_rate: float | None
    acceptance_rate_source: str | None
    server_accept_length: float | None
    request_accept_length: float | None
    by_category: dict[str, CategoryAcceptance]


class RequestsRow(TypedDict):
    """``requests_row``: None where no repeat's summary counted its requests."""

    requests_ok: int | None
    requests_failed: int | None


class GoodputRow(TypedDict, total=False):
    """``goodput_row``: every key, or none where no repeat measured goodput (no SLO)."""

    goodput_tok_s: float | None
    goodput_req_s: float | None
    goodput_share: float | None
    meets_slo: bool
    goodput_values: list[float | None]  # each repeat's


def _server_figure(runs: Sequence[LevelRun], key: str) -> tuple[float | None, str | None]:
    """The mean over repeats of one server figure, with its source (one for all repeats)."""
    present = [r.server for r in runs if isinstance(figure_at(r.server, key), int | float)]
    sources = {str(figure_at(s, f"{key}_source") or "") for s in present}
    source = (sources.pop() or None) if len(sources) == 1 else ("mixed" if sources else None)
    return _mean([s[key] for s in present]), source


def acceptance_row(runs: Sequence[LevelRun]) -> AcceptanceRow:
    """Both speculative figures of one level (mean over repeats), each with its source:
    `accept_length` (per drafted step) and `tokens_per_step` (per engine step), and the
    acceptance rate; and per category. Server counters over the level come first, the engine's
    per-request figures next, a server gauge (its own window) last."""
    server_len, server_len_source = _server_figure(runs, "accept_length")
    server_rate, server_rate_source = _server_figure(runs, "acceptance_rate")
    steps, steps_source = _server_figure(runs, "tokens_per_step")
    request_len = _mean([figure_at(r.summary, "acceptance", "accept_length") for r in runs])
    request_rate = _mean([figure_at(r.summary, "acceptance", "acceptance_rate") for r in runs])
    length, length_source = server_len, server_len_source
    if any(figure_at(r.server, "accept_length_source") == "not_determinable" for r in runs):
        # SGLang's per-request figure (completion tokens / verify calls) counts the same
        # undrafted steps: no accept length per drafted step to fall back on.
        length, length_source = None, "not_determinable"
    elif request_len is not None and (length is None or length_source == "gauge"):
        length, length_source = request_len, "requests"
    rate, rate_source = server_rate, server_rate_source
    if request_rate is not None and (rate is None or rate_source == "gauge"):
        rate, rate_source = request_rate, "requests"
    categories: dict[str, CategoryAcceptance] = {}
    names = sorted(
        {c for r in runs for c in (figure_at(r.summary, "acceptance", "by_category") or {})}
    )
    for name in names:
        per = [figure_at(r.summary, "acceptance", "by_category", name) or {} for r in runs]
        categories[name] = {
            "requests": sum(int(p.get("requests") or 0) for p in per),
            "accept_length": _mean([p.get("accept_length") for p in per]),
            "acceptance_rate": _mean([p.get("acceptance_rate") for p in per]),
        }
    return {
        "accept_length_source_text": SPEC_SOURCES.get(length_source or "", ""),
        "tokens_per_step_source_text": SPEC_SOURCES.get(steps_source or "", ""),
        "acceptance_rate_source_text": SPEC_SOURCES.get(rate_source or "", ""),
        "accept_length": length,
        "accept_length_source": length_source,
        "tokens_per_step": steps,
        "tokens_per_step_source": steps_source,
        "acceptance_rate": rate,
        "acceptance_rate_source": rate_source,
        "server_accept_length": server_len,
        "request_accept_length": request_len,
        "by_category": categories,
    }


def requests_row(runs: Sequence[LevelRun]) -> RequestsRow:
    """The level's measured requests over its repeats: succeeded and failed (the figures above
    are over the successful ones only, so a table showing them shows the failures too)."""
    counts = [figure_at(r.summary, "requests") for r in runs]
    counted = [c for c in counts if isinstance(c, dict)]
    if not counted:
        return {"requests_ok": None, "requests_failed": None}
    return {
        "requests_ok": sum(int(c.get("ok") or 0) for c in counted),
        "requests_failed": sum(int(c.get("failed") or 0) for c in counted),
    }


def goodput_row(runs: Sequence[LevelRun]) -> GoodputRow:
    goodputs: list[LevelGoodput] = []
    for run in runs:
        # The summary as stored (its JSON field); a level measured without an SLO has none.
        found: LevelGoodput | None = run.summary.get("goodput")
        if isinstance(found, dict):
            goodputs.append(found)
    if not goodputs:
        return {}
    return {
        "goodput_tok_s": _mean([g.get("goodput_tok_s") for g in goodputs]),
        "goodput_req_s": _mean([g.get("goodput_req_s") for g in goodputs]),
        "goodput_share": _mean([g.get("share") for g in goodputs]),
        # A level meets the SLO only if every repeat did.
        "meets_slo": all(bool(g.get("meets_slo")) for g in goodputs),
        "goodput_values": [g.get("goodput_tok_s") for g in goodputs],
    }


def slo_max_concurrency(rows: Sequence[LevelRow]) -> int | None:
    """The highest tested concurrency whose level met the SLO (None: none did)."""
    met = [row["concurrency"] for row in rows if row.get("meets_slo")]
    return max(met) if met else None


def read_goodput_points(
    path: Path, level: int, attempt: int, slo: Slo
) -> RequestArrays | list[RequestPoint]:
    """One level attempt's measured successful requests (benchmarks.sweeps.recordfile), those
    that missed the SLO with no tokens: from the file's columns, or from its parsed rows
    (``goodput_points``, the reference) where ``read_record_file_once`` is switched to a plain
    parse (the figures-unchanged test's old path)."""
    if read_record_file_once is _read_rows_once:
        gaps = any(name in slo.limits() for name in GAP_FIGURES)
        columns = read_record_columns_once(path, gaps=gaps).level(level, attempt)
        return columns.goodput_requests(slo) if columns is not None else []
    return goodput_points(read_record_file_once(path).level(level, attempt), slo)


def goodput_points(rows: Iterable[JsonObject], slo: Slo) -> list[RequestPoint]:
    """Measured successful requests of parsed rows, those that missed the SLO with no tokens."""
    points: list[RequestPoint] = []
    for data in rows:
        if data.get("warmup") or data.get("error_kind"):
            continue
        try:
            rec = RequestRecord.from_json(data, _EPOCH)
        except (KeyError, TypeError):
            continue
        if rec.end <= rec.start:
            continue
        tokens = rec.output_tokens if request_meets(rec, slo) else 0
        points.append(RequestPoint(start=rec.start, end=rec.end, output_tokens=tokens))
    return points


_read_rows_once = read_record_file_once


def _tokens(points: Sequence[RequestPoint]) -> int:
    if isinstance(points, RequestArrays):
        return points.total_tokens()
    return sum(p.output_tokens for p in points)


def goodput_curve(
    name: str, speculative: bool, grouped: dict[int, list[LevelRun]], slo: Slo
) -> Curve:
    """Goodput tok/s against concurrency; levels with no goodput are left out (no ratio)."""
    levels: list[LevelSample] = []
    for concurrency, runs in grouped.items():
        values = [figure_at(r.summary, "goodput", GOODPUT_METRIC) for r in runs]
        if not all(isinstance(v, int | float) and v > 0 for v in values):
            continue
        floats = [float(v) for v in values]
        if len(runs) >= 2:
            levels.append(LevelSample.from_repeats(concurrency, floats))
            continue
        points: Sequence[RequestPoint] = []
        if runs[0].records_path:
            run = runs[0]
            points = read_goodput_points(Path(run.records_path), run.index, run.attempt, slo)
        if len(points) >= 2 and _tokens(points) > 0:
            levels.append(LevelSample(concurrency, floats[0], requests=points))
        else:
            levels.append(LevelSample(concurrency, floats[0]))
    return Curve(name, levels, speculative=speculative, unit="goodput tok/s")
