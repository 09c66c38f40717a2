from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from benchlib.loadgen.health import HealthMonitor
from benchlib.loadgen.records import RequestRecord
from tests.benchlib.loadgen.stub_server import StubConfig, StubServer


def make_record(
    rid: str,
    start: float,
    chunks: list[tuple[float, int]],
    end: float | None = None,
    *,
    out: int | None = None,
    prompt: int | None = 10,
    error_kind: str | None = None,
    slot: int = 0,
    process: int = 0,
    warmup: bool = False,
) -> RequestRecord:
    """A record as the client would have filled it, built by hand."""
    return RequestRecord(
        request_id=rid,
        slot=slot,
        process=process,
        warmup=warmup,
        start=start,
        end=end if end is not None else (chunks[-1][0] if chunks else start),
        first_token=chunks[0][0] if chunks else None,
        chunk_times=[t for t, _ in chunks],
        chunk_tokens=[n for _, n in chunks],
        output_tokens=out if out is not None else sum(n for _, n in chunks),
        prompt_tokens=prompt,
        finish_reason=None if error_kind else "length",
        error_kind=error_kind,
        error=error_kind,
    )


def record_with_every_field(rid: str, start: float) -> RequestRecord:
    """A record with every optional field set (times at binary-exact offsets from ``start``):
    what a test of every key's handling (order, shift, round trip) builds on."""
    return RequestRecord(
        request_id=rid,
        slot=3,
        process=1,
        warmup=True,
        start=start,
        end=start + 1.5,
        sent=start + 0.125,
        written=start + 0.25,
        first_token=start + 0.5,
        chunk_times=[start + 0.5, start + 1.0],
        chunk_tokens=[1, 2],
        output_tokens=3,
        prompt_tokens=120,
        output_tokens_estimated=True,
        chunk_tokens_estimated=True,
        finish_reason="length",
        error_kind="http",
        error="http went wrong",
        retries=1,
        category="code",
        spec_steps=2,
        spec_drafted=4,
        spec_accepted=3,
        scheduled=start - 0.25,
        first_answer=start + 1.0,
        reasoning_tokens=1,
        session=7,
        turn=2,
    )


def clock_tolerance(times: Iterable[float], *, shortest_interval_s: float) -> tuple[float, float]:
    """(abs_tol, rel_tol) for comparing summaries of records whose times went through a shift.

    A perf_counter() time of magnitude T is held to one ulp(T): that is ~2e-12 s at a few hours of
    uptime but ~2.4e-7 s at 2^30 s, so a fixed tolerance passes or fails with the machine's uptime.
    Rebasing a time onto another clock and back rounds it twice, so a difference of two times is
    off by at most 4 ulp of the largest magnitude it passed through, a quantile interpolated
    between two such differences by at most twice that, and the summary prints milliseconds
    (x1000). A rate divides by an interval no shorter than `shortest_interval_s`, which turns that
    absolute error into a relative one. Never tighter than 1e-9, the precision of the arithmetic."""
    ulp = math.ulp(max(abs(t) for t in times))
    abs_tol = max(1e-9, 1000.0 * 8 * ulp)
    rel_tol = max(1e-9, 8 * ulp / shortest_interval_s)
    return abs_tol, rel_tol


def shortest_interval(records: Iterable[RequestRecord]) -> float:
    """The shortest positive gap between two successive times of one record.

    Rates and the steady window's interpolated tokens divide by intervals no shorter than this."""
    gaps: list[float] = []
    for r in records:
        times = [r.start, *r.chunk_times, r.end]
        gaps.extend(b - a for a, b in itertools.pairwise(times) if b > a)
    return min(gaps)


def stall_bound_s(client_health: dict[str, Any]) -> float:
    """How long the client's event loop may have stood still, from its own health figures.

    The monitor ticks every HealthMonitor().interval seconds and measures how late each tick
    wakes; a stall that begins just after a tick is seen short by up to one interval. Tests of
    timing on a loaded machine allow this much, measured, instead of a fixed margin."""
    return (client_health["loop_lag_ms"]["max"] or 0.0) / 1000 + HealthMonitor().interval


def assert_close(
    a: Any, b: Any, path: str = "", *, abs_tol: float = 1e-9, rel_tol: float = 1e-9
) -> None:
    """Deep equality with floats compared to `rel_tol` relative or `abs_tol` absolute.

    Counts, ids and strings compare exactly. The float tolerances of a comparison of times come
    from `clock_tolerance`, derived from the clock's resolution at the values compared."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol), (
            f"{path}: {a} != {b} (rel {rel_tol:g}, abs {abs_tol:g})"
        )
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), f"{path}: keys {a.keys() ^ b.keys()}"
        for k in a:
            assert_close(a[k], b[k], f"{path}.{k}", abs_tol=abs_tol, rel_tol=rel_tol)
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
        assert len(a) == len(b), f"{path}: lengths"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, f"{path}[{i}]", abs_tol=abs_tol, rel_tol=rel_tol)
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


@pytest.fixture
async def stub() -> AsyncIterator[StubServer]:
    async with StubServer(StubConfig(chunk_delay=0.002, first_delay=0.003)) as server:
        yield server
