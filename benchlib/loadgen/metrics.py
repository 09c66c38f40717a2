from __future__ import annotations

# Pure summaries of a level's request records (definitions in docs/measurement.md).
#
# Nothing here depends on the order of the records: sums use math.fsum and quantiles sort first, so
# the summary of the union of several processes' records is the same number however they are
# concatenated. That is what makes a multi-process level exact.
import dataclasses
import itertools
import math
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, cast

from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.steady import DEFAULT_DIP_TOLERANCE_S, steady_figures
from benchlib.loadgen.summary import Distribution, LevelSummary

# One interpolated quantile for the load generator and the statistics. It lives with the
# statistics, which import only the standard library (the simulator's nvidia-smi stand-in
# runs them under a host's plain python3); the load generator may depend on them, not back.
from benchlib.stats.intervals import quantile

if TYPE_CHECKING:
    from benchlib.loadgen.goodput import Slo

# Events of one request that arrive less than this after the previous one are one delivery: the
# tokens of one engine step sent as separate SSE events (llama-server sends each accepted token
# of a verify step as its own event: tens of microseconds apart on a quiet machine, about 1 ms,
# sometimes 2-3, on a loaded one) or read together. A delivery also spans less than this from its
# first event: without that bound, steps shorter than the threshold (a small model on a fast GPU
# decodes in under a millisecond) would chain a whole request into one delivery.
DELIVERY_GAP_S = 0.002


def distribution(values: Iterable[float], *, scale: float = 1.0) -> Distribution:
    """count, mean, std (population), min, p50, p90, p95, p99, max of `values` times `scale`."""
    vals = sorted(values)
    n = len(vals)
    if not n:
        return _no_distribution()
    mean = math.fsum(vals) / n
    return Distribution(
        count=n,
        mean=mean * scale,
        std=math.sqrt(math.fsum((x - mean) ** 2 for x in vals) / n) * scale,
        min=vals[0] * scale,
        p50=quantile(vals, 0.50) * scale,
        p90=quantile(vals, 0.90) * scale,
        p95=quantile(vals, 0.95) * scale,
        p99=quantile(vals, 0.99) * scale,
        max=vals[-1] * scale,
    )


def _no_distribution() -> Distribution:
    """The distribution of no values: a count of 0 and no figures."""
    return Distribution(
        count=0, mean=None, std=None, min=None, p50=None, p90=None, p95=None, p99=None, max=None
    )


@dataclass(frozen=True, slots=True)
class Delivery:
    """What the reader got at once: the arrival of its first and last event, and its tokens."""

    first: float
    last: float
    tokens: int


def deliveries(
    times: Sequence[float], tokens: Sequence[int], gap: float = DELIVERY_GAP_S
) -> list[Delivery]:
    """The request's deliveries: runs of events each arriving less than `gap` after the previous
    one and less than `gap` after the run's first (docs/measurement.md, "Deliveries").

    Where the span bound, not a pause, ends a run, the run is cut at its widest gap instead
    when that is wider than the gap before the next event: the events after it are the first
    events of the step the next one belongs to (a step sent as several events), and cutting a
    step in two would spread its time over the wrong tokens.
    """
    runs: list[list[tuple[float, int]]] = []
    for t, n in zip(times, tokens, strict=True):
        run = runs[-1] if runs else None
        if run is not None and t - run[-1][0] < gap and t - run[0][0] < gap:
            run.append((t, n))
            continue
        new = [(t, n)]
        if run is not None and t - run[-1][0] < gap and len(run) > 1:
            widest = max(range(1, len(run)), key=lambda j: (run[j][0] - run[j - 1][0], j))
            if run[widest][0] - run[widest - 1][0] > t - run[-1][0]:
                new = [*run[widest:], (t, n)]
                del run[widest:]
        runs.append(new)
    return [Delivery(r[0][0], r[-1][0], sum(n for _, n in r)) for r in runs]


def delivery_gaps(groups: Sequence[Delivery]) -> list[tuple[float, int]]:
    """(gap, tokens) per delivery after the first: its tokens arrived over the time from the
    previous delivery's last event to its own last event (so the gaps add up, exactly, to the
    time from the first delivery's last event to the last one's)."""
    return [(b.last - a.last, b.tokens) for a, b in itertools.pairwise(groups)]


def _chunked(values: Any, size: int = 65536) -> Iterator[float]:
    """The values of a numpy array as Python floats, converted a slice at a time (a sum over
    them is then the same Python arithmetic as over a list, without the list)."""
    for i in range(0, len(values), size):
        yield from values[i : i + size].tolist()


def _array_distribution(values: Any, *, scale: float = 1.0) -> Distribution:
    """`distribution` of a float64 numpy array, which it sorts in place: the same numbers
    (the sums are math.fsum over the same floats, the quantiles the same interpolation over
    the same sorted values) at 8 bytes a value where a list of floats takes 32."""
    values.sort()
    n = len(values)
    if not n:
        return _no_distribution()
    mean = math.fsum(_chunked(values)) / n
    view = memoryview(values)  # indexes to Python floats, as a list would
    return Distribution(
        count=n,
        mean=mean * scale,
        std=math.sqrt(math.fsum((x - mean) ** 2 for x in _chunked(values)) / n) * scale,
        min=float(values[0]) * scale,
        p50=quantile(view, 0.50) * scale,
        p90=quantile(view, 0.90) * scale,
        p95=quantile(view, 0.95) * scale,
        p99=quantile(view, 0.99) * scale,
        max=float(values[-1]) * scale,
    )


def _spread_out(gaps: Any, tokens: Any) -> Any:
    """Each gap split evenly over the tokens it brought: n samples of gap / n (the gap itself
    for one token, none for none), as numpy arrays."""
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):  # a 0-token gap is repeated 0 times
        return np.repeat(gaps / tokens, tokens)


# A source of a level's records: each call iterates them afresh (a list, or a file read again),
# so a summary can make several passes holding one record at a time.
RecordSource = Callable[[], Iterable[RequestRecord]]


def _timed_ok(records: Iterable[RequestRecord]) -> Iterator[RequestRecord]:
    """The measured successful requests that got a first token: those with token samples."""
    return (r for r in records if not r.warmup and r.ok and r.first_token is not None)


def _chunk_figures(source: RecordSource) -> tuple[Distribution, Distribution, Counter[int]]:
    """Per chunk: the gap distribution, the per-event (token-spread) one, tokens per chunk."""
    import numpy as np

    gaps = array("d")
    tokens = array("i")
    per_chunk: Counter[int] = Counter()
    for r in _timed_ok(source()):
        times, toks = r.chunk_times, r.chunk_tokens
        per_chunk.update(toks)
        for i in range(1, len(times)):
            gaps.append(times[i] - times[i - 1])
            tokens.append(toks[i])
    gap_array = np.frombuffer(gaps, dtype=np.float64).copy()
    del gaps
    itl_chunk = _array_distribution(gap_array.copy(), scale=1e3)
    spread = _spread_out(gap_array, np.frombuffer(tokens, dtype=np.int32).clip(min=0))
    del gap_array, tokens
    return itl_chunk, _array_distribution(spread, scale=1e3), per_chunk


def _delivery_figures(source: RecordSource) -> tuple[Distribution, Distribution, Counter[int]]:
    """Per delivery: the token-level ITL distribution, the per-delivery gaps, tokens each."""
    import numpy as np

    gaps = array("d")
    tokens = array("i")
    per_delivery: Counter[int] = Counter()
    for r in _timed_ok(source()):
        groups = deliveries(r.chunk_times, r.chunk_tokens)
        per_delivery.update(d.tokens for d in groups)
        for gap, n in delivery_gaps(groups):
            gaps.append(gap)
            tokens.append(n)
    gap_array = np.frombuffer(gaps, dtype=np.float64).copy()
    del gaps
    itl_delivery = _array_distribution(gap_array.copy(), scale=1e3)
    spread = _spread_out(gap_array, np.frombuffer(tokens, dtype=np.int32).clip(min=0))
    del gap_array, tokens
    return _array_distribution(spread, scale=1e3), itl_delivery, per_delivery


def _without_chunks(r: RequestRecord) -> RequestRecord:
    return r if not r.chunk_times else dataclasses.replace(r, chunk_times=[], chunk_tokens=[])


class SummaryOptions(TypedDict, total=False):
    """`summarize_level`'s keywords beside the concurrency, passed on to
    `summarize_level_passes` (whose defaults they take)."""

    mode: str
    partial: bool
    anchor: ClockAnchor | None
    dip_tolerance: float
    slo: Slo | None


def summarize_level(
    records: Iterable[RequestRecord], *, concurrency: int, **options: Unpack[SummaryOptions]
) -> LevelSummary:
    """The level summary from its request records (warm-up records are ignored).

    `mode` is "closed" (C workers back to back: the steady window is where all C are in flight)
    or "rate" (Poisson arrivals: the steady window is the arrival window, first to last send).
    With an `anchor`, window bounds are also given in wall-clock epoch seconds. With an `slo`,
    the summary has `goodput` (goodput.level_goodput over the level's duration).
    """
    kept = records if isinstance(records, list) else list(records)
    return summarize_level_passes(lambda: kept, concurrency=concurrency, **options)


def summarize_level_passes(
    source: RecordSource,
    *,
    concurrency: int,
    mode: str = "closed",
    partial: bool = False,
    anchor: ClockAnchor | None = None,
    dip_tolerance: float = DEFAULT_DIP_TOLERANCE_S,
    slo: Slo | None = None,
) -> LevelSummary:
    """`summarize_level` over records that `source()` gives afresh on each call (a records file
    read again): four passes, each holding one record's chunks at a time, the per-request
    figures and one token-sample array (8 bytes a sample). The same numbers as over a list."""
    from benchlib.loadgen.acceptance import level_acceptance
    from benchlib.loadgen.goodput import goodput_from_figures, request_figures

    # Pass 1: every measured request without its chunks, and its SLO figures (which need them).
    measured: list[RequestRecord] = []
    figures: list[dict[str, float]] = []
    for r in source():
        if r.warmup:
            continue
        if slo is not None:
            figures.append(request_figures(r))
        measured.append(_without_chunks(r))
    ok = [r for r in measured if r.ok]
    failed = [r for r in measured if not r.ok]
    by_cause = Counter(r.error_kind for r in failed)
    timed = [r for r in measured if r.error_kind != "cancelled"]
    intervals = [(r.start, r.end) for r in measured]

    # Built key by key below; its shape is declared once in summary.LevelSummary.
    out: dict[str, Any] = {
        "concurrency": concurrency,
        "mode": mode,
        "partial": partial,
        "requests": {
            "total": len(measured),
            "ok": len(ok),
            "failed": len(failed),
            "errors_by_cause": {k: by_cause[k] for k in sorted(by_cause, key=str)},
            # requests sent twice: their kept-alive connection was closed before a response
            "retried": sum(1 for r in measured if r.retries),
        },
    }

    out_tokens = sum(r.output_tokens for r in ok)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    if timed:
        t_first = min(r.start for r in timed)
        t_last = max(r.end for r in timed)
        duration = t_last - t_first
    else:
        t_first = t_last = duration = 0.0
    out["duration_s"] = duration
    out["output_tokens"] = out_tokens
    out["prompt_tokens"] = prompt_tokens
    out["output_tok_s"] = out_tokens / duration if duration > 0 else None
    out["total_tok_s"] = (out_tokens + prompt_tokens) / duration if duration > 0 else None
    out["request_rate"] = len(ok) / duration if duration > 0 else None
    busy = math.fsum(r.end - r.start for r in timed)
    out["achieved_concurrency"] = busy / duration if duration > 0 else None
    if anchor is not None and timed:
        out["window_wall"] = [anchor.to_wall(t_first), anchor.to_wall(t_last)]

    # Pass 2: the tokens each request made inside the steady window.
    out["steady"] = steady_figures(
        lambda: (r for r in source() if not r.warmup and r.ok),
        intervals,
        concurrency,
        mode,
        anchor,
        dip_tolerance,
    )

    ttft: list[float] = []
    e2e: list[float] = []
    tpot: list[float] = []
    decode: list[float] = []
    send: list[float] = []
    ttft_sent: list[float] = []
    chunk_est = out_est = 0
    for r in ok:
        total = r.end - r.start
        e2e.append(total)
        chunk_est += r.chunk_tokens_estimated
        out_est += r.output_tokens_estimated
        if r.written is not None:
            send.append(r.written - r.start)
        if r.first_token is None:
            continue
        first = r.first_token - r.start
        ttft.append(first)
        if r.written is not None:
            ttft_sent.append(r.first_token - r.written)
        if r.output_tokens > 1:
            tpot.append((total - first) / (r.output_tokens - 1))
            if total > first:
                decode.append((r.output_tokens - 1) / (total - first))

    out["ttft_ms"] = distribution(ttft, scale=1e3)
    # The client's own send path, and TTFT counted from the request on the wire: the part of
    # TTFT the client spent before the server could see the request, and the rest.
    out["send_ms"] = distribution(send, scale=1e3)
    out["ttft_after_send_ms"] = distribution(ttft_sent, scale=1e3)
    out["tpot_ms"] = distribution(tpot, scale=1e3)
    # Token-level ITL over deliveries (docs/measurement.md); per event and per chunk beside it.
    # Passes 3 and 4: the chunks, then the deliveries, each pass's samples freed before the next.
    itl_chunk, itl_event, per_chunk = _chunk_figures(source)
    itl, itl_delivery, per_delivery = _delivery_figures(source)
    out["itl_ms"] = itl
    out["itl_event_ms"] = itl_event
    out["itl_chunk_ms"] = itl_chunk
    out["itl_delivery_ms"] = itl_delivery
    out["e2e_ms"] = distribution(e2e, scale=1e3)
    out["decode_tok_s"] = distribution(decode)
    out["tokens_per_chunk"] = {str(n): per_chunk[n] for n in sorted(per_chunk)}
    n_chunks = sum(per_chunk.values())
    chunked_tokens = sum(n * c for n, c in per_chunk.items())
    out["mean_tokens_per_chunk"] = chunked_tokens / n_chunks if n_chunks else None
    n_deliveries = sum(per_delivery.values())
    out["mean_tokens_per_delivery"] = chunked_tokens / n_deliveries if n_deliveries else None

    out["estimated"] = {
        "chunk_tokens": chunk_est,
        "output_tokens": out_est,
        "any": bool(chunk_est or out_est),
    }
    out["acceptance"] = level_acceptance(ok)
    if slo is not None:
        out["goodput"] = goodput_from_figures(measured, figures, slo, duration=duration)
    return cast(LevelSummary, out)
