from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import pytest

from benchmarks.loadgen.records import RequestRecord
from tests.loadgen.stub_server import StubConfig, StubServer


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


def assert_close(a: Any, b: Any, path: str = "") -> None:
    """Deep equality with floats compared to 1e-9 relative or 1e-9 absolute.

    The absolute part matters for sub-millisecond differences of times (send_ms): rebased onto a
    clock 1000 s away, their last bits move by ~1e-13 s, 1e-10 in milliseconds."""
    if isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), f"{path}: {a} != {b}"
    elif isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), f"{path}: keys {a.keys() ^ b.keys()}"
        for k in a:
            assert_close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
        assert len(a) == len(b), f"{path}: lengths"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, f"{path}[{i}]")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


@pytest.fixture
async def stub() -> AsyncIterator[StubServer]:
    async with StubServer(StubConfig(chunk_delay=0.002, first_delay=0.003)) as server:
        yield server
