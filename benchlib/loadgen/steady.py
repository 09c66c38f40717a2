"""The steady window of a level: where the asked load was actually in flight, and what the
server delivered inside it (definitions in docs/measurement.md, "Steady window").

Separate from ``metrics`` (the whole-level summary) because it is the one figure that reads
the requests on a shared time axis rather than one by one: the in-flight count over time, the
window it picks, and each request's tokens pro-rated into that window. Like ``metrics`` it is
order-independent (sorted events, ``math.fsum``), so a merged multi-process level is exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import NotRequired, TypedDict

from benchlib.loadgen.records import ClockAnchor, RequestRecord

# Dips of the in-flight count below its target shorter than this are a closed-loop worker handing
# its slot from one request to the next, not idle capacity.
DEFAULT_DIP_TOLERANCE_S = 0.05


class SteadyFigures(TypedDict):
    """A level summary's ``steady``: the window's figures (the keys after ``output_tok_s`` only
    where a window of some length was found)."""

    target: int
    in_flight_level: int
    reached: bool
    duration_s: float
    output_tokens: float
    output_tok_s: float | None
    arrived_tokens: NotRequired[int]
    arrived_tok_s: NotRequired[float]
    mean_in_flight: NotRequired[float]
    per_request_tok_s: NotRequired[float | None]
    window_wall: NotRequired[list[float]]


def in_flight_segments(
    intervals: Iterable[tuple[float, float]], target: int
) -> tuple[list[tuple[float, float]], int]:
    """Maximal intervals where at least `target` requests are in flight, and the peak count.

    A request is in flight on [start, end). At equal times ends count before starts, so a slot
    handed from one request to the next at the same instant never looks busy twice.
    """
    events: list[tuple[float, int]] = []
    for s, e in intervals:
        events.append((s, 1))
        events.append((e, -1))
    events.sort()
    segments: list[tuple[float, float]] = []
    n = peak = 0
    seg_start: float | None = None
    for t, d in events:
        n += d
        peak = max(peak, n)
        if n >= target and seg_start is None:
            seg_start = t
        elif n < target and seg_start is not None:
            if t > seg_start:
                segments.append((seg_start, t))
            seg_start = None
    return segments, peak


def steady_window(
    intervals: Sequence[tuple[float, float]],
    target: int,
    *,
    dip_tolerance: float = DEFAULT_DIP_TOLERANCE_S,
) -> tuple[tuple[float, float] | None, int, bool]:
    """The longest interval with `target` requests in flight, ignoring dips under the tolerance.

    Returns (window or None, the in-flight level used, whether `target` was reached). When the
    target is never reached (fewer requests than slots, a server refusing connections) the window
    is taken at the peak in-flight level instead and `reached` is False.
    """
    segments, peak = in_flight_segments(intervals, target)
    level, reached = target, True
    if not segments:
        if peak == 0:
            return None, 0, False
        level, reached = peak, False
        segments, _ = in_flight_segments(intervals, peak)
        if not segments:
            return None, peak, False
    merged = [segments[0]]
    for s, e in segments[1:]:
        if s - merged[-1][1] < dip_tolerance:
            merged[-1] = (merged[-1][0], e)
        else:
            merged.append((s, e))
    best = max(merged, key=lambda seg: (seg[1] - seg[0], -seg[0]))
    return best, level, reached


def mean_in_flight(intervals: Iterable[tuple[float, float]], a: float, b: float) -> float:
    """The time-average number of requests in flight over [a, b]."""
    if b <= a:
        return 0.0
    busy = math.fsum(max(0.0, min(e, b) - max(s, a)) for s, e in intervals)
    return busy / (b - a)


def window_tokens(times: Sequence[float], tokens: Sequence[int], a: float, b: float) -> float:
    """Output tokens of one request produced in the window (a, b], token-level.

    A chunk of n tokens arriving at t after the request's previous chunk at t' stands for n
    tokens made evenly over (t', t]: the part of that interval inside the window counts. The
    first chunk counts where it arrives. Counting whole chunks at their arrival instead makes a
    short window's figure jump by a whole decode step's burst when an edge falls inside one.
    """
    total = 0.0
    prev = None
    for t, n in zip(times, tokens, strict=True):
        if prev is None or t <= prev:
            if a < t <= b:
                total += n
        elif t > a and prev < b:
            total += n * (min(t, b) - max(prev, a)) / (t - prev)
        prev = t
    return total


def steady_figures(
    ok: Callable[[], Iterable[RequestRecord]],
    intervals: Sequence[tuple[float, float]],
    concurrency: int,
    mode: str,
    anchor: ClockAnchor | None,
    dip_tolerance: float,
) -> SteadyFigures:
    """The steady window's figures (docs/measurement.md): where all ``concurrency`` requests
    are in flight (closed loop), else the arrival window (rate mode); the tokens each request
    made inside it, spread over its chunks' gaps (``window_tokens``). ``ok`` gives the level's
    measured successful records afresh on each call."""
    window: tuple[float, float] | None
    if mode == "rate":
        starts = [s for s, _ in intervals]
        window = (min(starts), max(starts)) if starts else None
        level, reached = concurrency, window is not None
    else:
        window, level, reached = steady_window(intervals, concurrency, dip_tolerance=dip_tolerance)
    if window is None or window[1] <= window[0]:
        return SteadyFigures(
            target=concurrency,
            in_flight_level=level,
            reached=reached,
            duration_s=0.0,
            output_tokens=0,
            output_tok_s=None,
        )
    a, b = window
    arrived = 0
    spread: list[float] = []
    for r in ok():
        times = r.chunk_times
        if not times or times[-1] <= a or times[0] > b:
            continue
        spread.append(window_tokens(times, r.chunk_tokens, a, b))
        arrived += sum(n for t, n in zip(times, r.chunk_tokens, strict=True) if a < t <= b)
    tokens = math.fsum(spread)
    inflight = mean_in_flight(intervals, a, b)
    tok_s = tokens / (b - a)
    out = SteadyFigures(
        target=concurrency,
        in_flight_level=level,
        reached=reached,
        duration_s=b - a,
        output_tokens=tokens,
        output_tok_s=tok_s,
        arrived_tokens=arrived,
        arrived_tok_s=arrived / (b - a),
        mean_in_flight=inflight,
        per_request_tok_s=tok_s / inflight if inflight > 0 else None,
    )
    if anchor is not None:
        out["window_wall"] = [anchor.to_wall(a), anchor.to_wall(b)]
    return out
