from __future__ import annotations

# Ramp-up within one level: the arrival rate rises from a start rate to the level's request rate,
# linearly or exponentially, as vLLM's `bench serve --ramp-up-strategy` does (its rate at
# request i of n: start + (end - start) i / (n - 1), or start (end / start)^(i / (n - 1))). Here
# the progress is the share of the level's requests issued, or of its duration where it has one
# instead. The figures per time slice (arrivals, throughput, TTFT) show where the server stops
# keeping up, inside the one level.
import math
from collections.abc import Iterable

from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.summary import RampSlice
from benchlib.stats.intervals import quantile

RAMPS = ("linear", "exponential")


def ramp_rate(strategy: str, start: float, end: float, progress: float) -> float:
    """The arrival rate at `progress` (0 at the level's start, 1 at its end) in req/s."""
    p = min(1.0, max(0.0, progress))
    if strategy == "linear":
        return start + (end - start) * p
    if strategy == "exponential":
        return float(start * (end / start) ** p)
    raise ValueError(f"unknown ramp {strategy!r} (known: {', '.join(RAMPS)})")


def slice_figures(
    records: Iterable[RequestRecord], *, slices: int, start_rate: float, end_rate: float,
    strategy: str,
) -> list[RampSlice]:  # fmt: skip
    """Per time slice of the arrival window (first to last request start, cut in `slices`
    equal parts): the rate the ramp offered at the slice's middle, the arrivals and their rate,
    the requests that started there and finished, the output tokens delivered within the slice
    per second (from every request's chunks), the TTFT p50 and p99 and the TPOT p50 of the
    requests that started there (ms). A pure function of the records."""
    recs = [r for r in records if not r.warmup]
    if not recs or slices < 1:
        return []
    first = min(r.start for r in recs)
    last = max(r.start for r in recs)
    width = (last - first) / slices if last > first else 0.0
    rows: list[RampSlice] = []
    for k in range(slices):
        lo = first + k * width
        hi = first + (k + 1) * width
        inside = [r for r in recs if lo <= r.start < hi or (k == slices - 1 and r.start == hi)]
        ok = [r for r in inside if r.ok]
        ttfts = sorted((r.first_token - r.start) * 1e3 for r in ok if r.first_token is not None)
        tpots = sorted(
            (r.end - r.first_token) * 1e3 / (r.output_tokens - 1)
            for r in ok
            if r.first_token is not None and r.output_tokens > 1
        )
        rows.append(
            RampSlice(
                t0_s=k * width,
                t1_s=(k + 1) * width,
                offered_rate=ramp_rate(strategy, start_rate, end_rate, (k + 0.5) / slices),
                arrivals=len(inside),
                arrival_rate=len(inside) / width if width > 0 else None,
                ok=len(ok),
                output_tok_s=(
                    math.fsum(
                        n
                        for r in recs
                        if r.ok
                        for t, n in zip(r.chunk_times, r.chunk_tokens, strict=True)
                        if lo <= t < hi
                    )
                    / width
                    if width > 0
                    else None
                ),
                ttft_p50_ms=quantile(ttfts, 0.5) if ttfts else None,
                ttft_p99_ms=quantile(ttfts, 0.99) if ttfts else None,
                tpot_p50_ms=quantile(tpots, 0.5) if tpots else None,
            )
        )
    return rows
