"""What a comparison adds about the workload: acceptance per level (and per prompt category)
and goodput under the experiment's SLOs (no ORM here, like comparison.py).

Acceptance per level: the server's own figure for exactly that level (``server_metrics``,
/metrics counter differences) where it was scraped, else the per-request figures the engine
reported (the level summary's ``acceptance``); per category always from the requests.

Goodput: each level's ``goodput_tok_s`` (load-generator summary) is the figure shown and the
point estimate of the ratio, so the ratio is the row's two figures divided. Its interval comes
from the repeats when both sides have two or more, else from a bootstrap over that level's
requests (benchlib.stats), where a request that missed the SLO delivers no tokens.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchlib.loadgen.goodput import Slo, request_meets
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.stats import Curve, LevelSample, RequestPoint
from benchmarks.sweeps.recordfile import read_record_file

if TYPE_CHECKING:
    from benchmarks.experiments.comparison import LevelRun

GOODPUT_METRIC = "goodput_tok_s"
# Records are written with epoch times; any anchor reads them back on a consistent clock.
_EPOCH = ClockAnchor(t0_wall=0.0, t0_perf=0.0)


def _mean(values: Sequence[Any]) -> float | None:
    present = [float(v) for v in values if isinstance(v, int | float) and math.isfinite(v)]
    return statistics.fmean(present) if present else None


def _dig(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def acceptance_row(runs: Sequence[LevelRun]) -> dict[str, Any]:
    """Accept length and acceptance rate of one level (mean over repeats), and per category."""
    server_len = _mean([_dig(r.server, "accept_length") for r in runs])
    server_rate = _mean([_dig(r.server, "acceptance_rate") for r in runs])
    request_len = _mean([_dig(r.summary, "acceptance", "accept_length") for r in runs])
    request_rate = _mean([_dig(r.summary, "acceptance", "acceptance_rate") for r in runs])
    categories: dict[str, dict[str, Any]] = {}
    names = sorted({c for r in runs for c in (_dig(r.summary, "acceptance", "by_category") or {})})
    for name in names:
        per = [_dig(r.summary, "acceptance", "by_category", name) or {} for r in runs]
        categories[name] = {
            "requests": sum(int(p.get("requests") or 0) for p in per),
            "accept_length": _mean([p.get("accept_length") for p in per]),
            "acceptance_rate": _mean([p.get("acceptance_rate") for p in per]),
        }
    return {
        "accept_length": server_len if server_len is not None else request_len,
        "accept_length_source": (
            "server" if server_len is not None else ("requests" if request_len else None)
        ),
        "acceptance_rate": server_rate if server_rate is not None else request_rate,
        "server_accept_length": server_len,
        "request_accept_length": request_len,
        "by_category": categories,
    }


def goodput_row(runs: Sequence[LevelRun]) -> dict[str, Any]:
    goodputs: list[dict[str, Any]] = []
    for run in runs:
        found = run.summary.get("goodput")
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


def slo_max_concurrency(rows: Sequence[dict[str, Any]]) -> int | None:
    """The highest tested concurrency whose level met the SLO (None: none did)."""
    met = [row["concurrency"] for row in rows if row.get("meets_slo")]
    return max(met) if met else None


def read_goodput_points(path: Path, level: int, attempt: int, slo: Slo) -> list[RequestPoint]:
    """One level attempt's measured successful requests (benchmarks.sweeps.recordfile), those
    that missed the SLO with no tokens."""
    points: list[RequestPoint] = []
    for data in read_record_file(path).level(level, attempt):
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


def goodput_curve(
    name: str, speculative: bool, grouped: dict[int, list[LevelRun]], slo: Slo
) -> Curve:
    """Goodput tok/s against concurrency; levels with no goodput are left out (no ratio)."""
    levels: list[LevelSample] = []
    for concurrency, runs in grouped.items():
        values = [_dig(r.summary, "goodput", GOODPUT_METRIC) for r in runs]
        if not all(isinstance(v, int | float) and v > 0 for v in values):
            continue
        floats = [float(v) for v in values]
        if len(runs) >= 2:
            levels.append(LevelSample.from_repeats(concurrency, floats))
            continue
        points = []
        if runs[0].records_path:
            run = runs[0]
            points = read_goodput_points(Path(run.records_path), run.index, run.attempt, slo)
        if len(points) >= 2 and sum(p.output_tokens for p in points) > 0:
            levels.append(LevelSample(concurrency, floats[0], requests=points))
        else:
            levels.append(LevelSample(concurrency, floats[0]))
    return Curve(name, levels, speculative=speculative, unit="goodput tok/s")
