from __future__ import annotations

# Goodput: the requests (and their tokens) per second that met the latency targets (SLOs).
#
# Pure functions of a level's request records, like metrics.summarize_level. An SLO sets any of
# TTFT, TPOT, ITL, longest-gap and E2E limits in milliseconds, each a figure of one request. ITL
# is the request's mean token gap over its deliveries, as AIPerf, inference-perf and guidellm
# define a per-request ITL (TPOT-like; the p99 of its own gaps would be close to its worst gap and
# judge a speculative arm's bursts as slow); the worst gap has its own limit, `max_gap_ms`. A
# request meets the SLO when it succeeded and each set limit holds (a value exactly at the limit
# meets it); a failed or timed-out request meets none, whatever its timings. Per level, with scope
# "p99" the level meets the SLO when the p99 over the measured requests of each set figure is
# within its limit, a failed request counting as infinitely slow; with scope "request" when the
# share of requests meeting it reaches `attainment`.
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchlib.loadgen.metrics import deliveries, delivery_gaps
from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.summary import LevelGoodput
from benchlib.stats.intervals import quantile

SLO_FIGURES = ("ttft_ms", "tpot_ms", "itl_ms", "max_gap_ms", "e2e_ms")
SLO_SCOPES = ("p99", "request")
# Times are differences of perf_counter() readings: a limit is met within a nanosecond of it, so
# that a request exactly at the limit is not failed by the rounding of the subtraction.
_TOLERANCE_MS = 1e-6


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    itl_ms: float | None = None  # the request's mean token gap over its deliveries
    max_gap_ms: float | None = None  # the request's longest gap between two deliveries
    e2e_ms: float | None = None
    scope: str = "p99"
    attainment: float = 0.99  # the share of requests that must meet it (scope "request")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Slo | None:
        """An SLO from its JSON form; None when no limit is set."""
        if not data:
            return None
        limits = {k: _limit(k, data.get(k)) for k in SLO_FIGURES}
        if all(v is None for v in limits.values()):
            return None
        scope = str(data.get("scope") or "p99")
        if scope not in SLO_SCOPES:
            raise ValueError(f"SLO scope must be one of {', '.join(SLO_SCOPES)}")
        attainment = float(data.get("attainment") or 0.99)
        if not 0 < attainment <= 1:
            raise ValueError("SLO attainment must be in (0, 1]")
        return cls(**limits, scope=scope, attainment=attainment)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in SLO_FIGURES if getattr(self, k)}
        return out | {"scope": self.scope, "attainment": self.attainment}

    def limits(self) -> dict[str, float]:
        return {k: float(v) for k in SLO_FIGURES if (v := getattr(self, k)) is not None}


def _limit(name: str, value: Any) -> float | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"SLO {name} must be a number of milliseconds")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"SLO {name} must be a positive number of milliseconds")
    return float(value)


def request_figures(rec: RequestRecord) -> dict[str, float]:
    """A successful request's TTFT, TPOT, ITL (its mean token gap over deliveries), longest gap
    between deliveries and E2E, in ms; inf when failed."""
    if not rec.ok:
        return dict.fromkeys(SLO_FIGURES, math.inf)
    e2e = rec.end - rec.start
    out = {"e2e_ms": e2e * 1e3}
    if rec.first_token is None:
        return out | dict.fromkeys(("ttft_ms", "tpot_ms", "itl_ms", "max_gap_ms"), math.inf)
    ttft = rec.first_token - rec.start
    out["ttft_ms"] = ttft * 1e3
    out["tpot_ms"] = (e2e - ttft) / (rec.output_tokens - 1) * 1e3 if rec.output_tokens > 1 else 0.0
    gaps = delivery_gaps(deliveries(rec.chunk_times, rec.chunk_tokens))
    tokens = sum(n for _, n in gaps)
    # The mean of the request's token-level ITL samples (metrics.summarize_level's itl_ms).
    out["itl_ms"] = math.fsum(g for g, _ in gaps) / tokens * 1e3 if tokens else 0.0
    out["max_gap_ms"] = max(g for g, _ in gaps) * 1e3 if gaps else 0.0
    return out


def meets(figures: Mapping[str, float], limits: Mapping[str, float]) -> bool:
    return all(figures[k] <= limit + _TOLERANCE_MS for k, limit in limits.items())


def request_meets(rec: RequestRecord, slo: Slo) -> bool:
    """Whether one request met every limit of the SLO (failed requests never do)."""
    return rec.ok and meets(request_figures(rec), slo.limits())


def _p99(values: Sequence[float]) -> float | None:
    """The p99 (interpolated like intervals.quantile); inf when it touches a failed request."""
    if not values:
        return None
    vals = sorted(values)
    pos = 0.99 * (len(vals) - 1)
    if math.isinf(vals[math.floor(pos)]) or math.isinf(vals[math.ceil(pos)]):
        return math.inf  # inf - inf would make the interpolation NaN
    return quantile(vals, 0.99)


def level_goodput(records: Iterable[RequestRecord], slo: Slo, *, duration: float) -> LevelGoodput:
    """Per level: requests meeting the SLO, their share, goodput req/s and output tok/s over
    `duration` (the level's, as in its throughput), the p99 over requests of each set figure
    (failed requests as inf) and whether the level meets the SLO."""
    measured = [r for r in records if not r.warmup]
    return goodput_from_figures(
        measured, [request_figures(r) for r in measured], slo, duration=duration
    )


def goodput_from_figures(
    measured: Sequence[RequestRecord],
    figures_of: Sequence[Mapping[str, float]],
    slo: Slo,
    *,
    duration: float,
) -> LevelGoodput:
    """`level_goodput` from the measured requests and each one's `request_figures`, taken
    beforehand (a summary that streams the records keeps the figures, not the chunks)."""
    limits = slo.limits()
    good = 0
    good_tokens = 0
    per_figure: dict[str, list[float]] = {k: [] for k in limits}
    for rec, figures in zip(measured, figures_of, strict=True):
        if rec.ok and meets(figures, limits):
            good += 1
            good_tokens += rec.output_tokens
        for k in limits:
            per_figure[k].append(figures[k])
    total = len(measured)
    share = good / total if total else None
    p99 = {k: _p99(v) for k, v in per_figure.items()}
    if slo.scope == "p99":
        met = total > 0 and all(
            value is not None and value <= limits[k] + _TOLERANCE_MS for k, value in p99.items()
        )
    else:
        met = share is not None and share >= slo.attainment
    return LevelGoodput(
        slo=slo.to_dict(),
        requests=total,
        met=good,
        share=share,
        goodput_req_s=good / duration if duration > 0 else None,
        goodput_tok_s=good_tokens / duration if duration > 0 else None,
        p99={k: (None if v is None or math.isinf(v) else v) for k, v in p99.items()},
        p99_failed={k: v is not None and math.isinf(v) for k, v in p99.items()},
        meets_slo=met,
    )
