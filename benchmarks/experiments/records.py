"""A level's measured requests read back from a sweep's records file, as the points of the
comparison's intervals (read through ``benchmarks.experiments.level_runs``).

They are read as columns (``benchlib.arrays.columns``: one pass per file, a few arrays per
level); ``request_points`` is the reference over parsed rows they are tested against."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchlib.arrays.columns import RequestArrays
from benchlib.stats.types import RequestPoint
from benchmarks.sweeps.recordfile import read_record_columns_once, read_record_file_once


def request_points(records: Iterable[dict[str, Any]]) -> list[RequestPoint]:
    """Measured, successful requests as interval points (warm-up and failures left out)."""
    points = []
    for record in records:
        if record.get("warmup") or record.get("error_kind"):
            continue
        start, end = record.get("start"), record.get("end")
        if not isinstance(start, int | float) or not isinstance(end, int | float):
            continue
        if end <= start:
            continue
        first = record.get("first_token")
        points.append(
            RequestPoint(
                start=float(start),
                end=float(end),
                output_tokens=int(record.get("out") or 0),
                ttft=float(first) - float(start) if isinstance(first, int | float) else None,
                e2e=float(end) - float(start),
            )
        )
    return points


def read_request_points(path: Path, index: int, attempt: int) -> RequestArrays | list[RequestPoint]:
    """The measured, successful requests of one level attempt from a sweep's records file
    (see recordfile), as columns; ``request_points`` of the parsed rows where
    ``read_record_file_once`` is switched to a plain parse (the figures-unchanged test's old
    path)."""
    if read_record_file_once is not _read_rows_once:
        return request_points(read_record_file_once(path).level(index, attempt))
    level = read_record_columns_once(path).level(index, attempt)
    return level.requests() if level is not None else []


_read_rows_once = read_record_file_once
