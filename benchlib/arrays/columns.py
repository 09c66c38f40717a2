"""A records file read once into columns: numpy arrays per level attempt (no Django).

The comparison reads, of each request, its times, tokens, whether it was a warm-up and
whether it failed. Held as one dict per request (with its token chunks) that was about 3 KB a
request: a 1M-request arm did not fit in memory, and every statistic then looped over a
Python object per request. Here a file is read in one pass into a handful of arrays per
(level, attempt), ~60 bytes a request, and the statistics the comparison takes over every
request (throughput, achieved concurrency, the batch-means windows, the median TPOT, goodput
under an SLO) are array operations.

The figures are those of the loops over ``RequestPoint``s they replace, bit for bit: every
element-wise operation is the same IEEE operation on the same values, sums are added left to
right (``cumsum``, as the built-in ``sum`` and ``+=`` do, where numpy's pairwise ``sum`` would
move the last bits), sorts are stable like ``sorted``, and a compact file's times are its
integer microseconds divided by 1e6 as its row decoder does.

A compact file's blocks are decoded straight into columns (its chunk times are skipped unless
an SLO limits the token gaps); a JSON-lines file is parsed a line at a time. Either way memory
is the columns plus one block or line.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from benchlib.json_types import JsonObject
from benchlib.loadgen.goodput import Slo, request_figures
from benchlib.loadgen.records import ClockAnchor, OtherColumns, RequestRecord
from benchlib.loadgen.recordstore import (
    _PAYLOAD,
    MAGIC,
    ReadState,
    decode_block,
    iter_compact_blocks,
    iter_jsonl,
)
from benchlib.stats.types import RequestColumns, RequestPoint

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]

# Records are written with epoch times; any anchor reads them back on a consistent clock.
_EPOCH = ClockAnchor(t0_wall=0.0, t0_perf=0.0)
# The SLO figures that need a request's token chunks (its deliveries), not only its times.
GAP_FIGURES = ("itl_ms", "max_gap_ms")


def _sequential_sum(values: npt.NDArray[Any]) -> float:
    """Left to right, as ``sum`` over the same values in the same order."""
    return float(np.cumsum(values)[-1]) if len(values) else 0.0


def _frozen(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    values.flags.writeable = False
    return values


class RequestArrays(RequestColumns):
    """A level's successful measured requests as columns (``RequestPoint``s when iterated):
    start, end, output tokens and the first token's time (NaN where none came)."""

    def __init__(self, start: Floats, end: Floats, tokens: Ints, first: Floats) -> None:
        self.start = _frozen(start)
        self.end = _frozen(end)
        self.tokens = _frozen(tokens)
        self.first = _frozen(first)

    def __len__(self) -> int:
        return len(self.start)

    @overload
    def __getitem__(self, index: int) -> RequestPoint: ...
    @overload
    def __getitem__(self, index: slice) -> RequestArrays: ...
    def __getitem__(self, index: int | slice) -> RequestPoint | RequestArrays:
        if isinstance(index, slice):
            return self._take(index)
        first = float(self.first[index])
        start, end = float(self.start[index]), float(self.end[index])
        return RequestPoint(
            start=start,
            end=end,
            output_tokens=int(self.tokens[index]),
            ttft=None if math.isnan(first) else first - start,
            e2e=end - start,
        )

    def __iter__(self) -> Iterator[RequestPoint]:
        for i in range(len(self)):
            yield self[i]

    def _take(self, index: Any) -> RequestArrays:
        return RequestArrays(
            self.start[index], self.end[index], self.tokens[index], self.first[index]
        )

    def _span(self) -> float:
        span = float(self.end.max()) - float(self.start.min())
        if span <= 0:
            raise ValueError("the requests span no time")
        return span

    def throughput(self) -> float:
        # The tokens are integers: any order of adding them is exact.
        return int(self.tokens.sum()) / self._span()

    def achieved_concurrency(self) -> float:
        span = self._span()
        return _sequential_sum(self.end - self.start) / span

    def in_start_order(self) -> RequestArrays:
        # lexsort is stable, like sorted(key=(start, end)): ties keep the file's order.
        return self._take(np.lexsort((self.end, self.start)))

    def window_throughputs(self, k: int) -> list[float]:
        first = float(self.start.min())
        span = float(self.end.max()) - first
        width = span / k
        rate = self.tokens / (self.end - self.start)
        lo, hi = self.start - first, self.end - first
        # Each request's windows, request by request, as the loop visits them.
        w_from = np.maximum(0, np.floor_divide(lo, width).astype(np.int64))
        w_to = np.minimum(k, np.floor_divide(hi, width).astype(np.int64) + 1)
        counts = np.maximum(0, w_to - w_from)
        row = np.repeat(np.arange(len(self)), counts)
        window = w_from[row] + (np.arange(len(row)) - np.repeat(np.cumsum(counts) - counts, counts))
        overlap = np.minimum(hi[row], (window + 1) * width) - np.maximum(lo[row], window * width)
        kept = overlap > 0
        window, contribution = window[kept], rate[row[kept]] * overlap[kept]
        # Per window, its contributions added in request order (a boolean mask keeps order).
        return [_sequential_sum(contribution[window == w]) / width for w in range(k)]

    def total_tokens(self) -> int:
        return int(self.tokens.sum())

    def median_tpot_ms(self, quantile: Any) -> float:
        """``decisions.tpot_statistic``: the median of (e2e - ttft) / (tokens - 1) over the
        requests with a first token and more than one token, in ms (0.0 when none)."""
        e2e = self.end - self.start
        ttft = self.first - self.start
        keep = ~np.isnan(self.first) & (self.tokens > 1)
        values = np.sort((e2e[keep] - ttft[keep]) / (self.tokens[keep] - 1)).tolist()
        return float(quantile(values, 0.5)) * 1e3 if values else 0.0


@dataclass
class LevelColumns:
    """Every record of one level attempt, in file order: what the comparison reads of them."""

    start: Floats
    end: Floats
    first: Floats  # NaN: no first token (or not a number)
    tokens: Ints
    warmup: Bools
    failed: Bools  # an error kind is recorded (a truthy one)
    error_none: Bools  # no error kind at all (``RequestRecord.ok``)
    timed: Bools  # start and end are numbers, the end after the start
    first_bad: Bools  # a first token that is neither a number nor missing
    # Per request, the SLO figures that need its deliveries (``GAP_FIGURES``), when read.
    gaps: dict[str, Floats] | None = None

    def __len__(self) -> int:
        return len(self.start)

    def requests(self) -> RequestArrays:
        """The measured, successful requests (``records.request_points``'s filter)."""
        keep = ~self.warmup & ~self.failed & self.timed
        return RequestArrays(self.start[keep], self.end[keep], self.tokens[keep], self.first[keep])

    def goodput_requests(self, slo: Slo) -> RequestArrays:
        """The measured, successful requests, those that missed ``slo`` with no tokens
        (``workload.read_goodput_points``'s points, ``goodput.request_meets`` per request)."""
        keep = ~self.warmup & ~self.failed & self.timed & ~self.first_bad
        start, end, first = self.start[keep], self.end[keep], self.first[keep]
        tokens, ok = self.tokens[keep], self.error_none[keep]
        limits = slo.limits()
        e2e = end - start
        ttft = first - start
        no_first = np.isnan(first)
        inf = np.full(len(start), math.inf)
        figures: dict[str, Floats] = {
            "e2e_ms": e2e * 1e3,
            "ttft_ms": np.where(no_first, inf, ttft * 1e3),
        }
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot = np.where(tokens > 1, (e2e - ttft) / (tokens - 1) * 1e3, 0.0)
        figures["tpot_ms"] = np.where(no_first, inf, tpot)
        if any(name in limits for name in GAP_FIGURES):
            if self.gaps is None:
                raise ValueError("the SLO limits token gaps: read the file with gaps=True")
            for name in GAP_FIGURES:
                figures[name] = np.where(no_first, inf, self.gaps[name][keep])
        meets = ok.copy()
        for name, limit in limits.items():
            # A failed request's figures are all inf: it never meets a limit.
            meets &= np.where(ok, figures[name], inf) <= limit + _TOLERANCE_MS
        return RequestArrays(start, end, np.where(meets, tokens, 0), first)


# goodput._TOLERANCE_MS: a limit is met within a nanosecond of it.
_TOLERANCE_MS = 1e-6


@dataclass
class RecordColumns:
    """A records file's levels as columns, with what the pass met besides rows."""

    path: Path
    exists: bool = True
    levels: dict[tuple[int, int], LevelColumns] = field(default_factory=dict)
    bad_lines: list[int] = field(default_factory=list)
    unlabelled: int = 0
    gaps: bool = False

    def level(self, index: int, attempt: int) -> LevelColumns | None:
        return self.levels.get((index, attempt))


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else math.nan


class _Builder:
    """Columns of one level attempt, appended a row or a block at a time."""

    NAMES = ("start", "end", "first", "tokens", "warmup", "failed", "error_none", "first_bad")

    def __init__(self, gaps: bool) -> None:
        self.parts: dict[str, list[npt.NDArray[Any]]] = {name: [] for name in self.NAMES}
        self.gap_parts: dict[str, list[Floats]] | None = (
            {name: [] for name in GAP_FIGURES} if gaps else None
        )

    def add(self, columns: dict[str, npt.NDArray[Any]]) -> None:
        for name in self.NAMES:
            self.parts[name].append(columns[name])
        if self.gap_parts is not None:
            for name in GAP_FIGURES:
                self.gap_parts[name].append(columns[name])

    def build(self) -> LevelColumns:
        joined = {name: np.concatenate(parts) for name, parts in self.parts.items()}
        start, end = joined["start"], joined["end"]
        with np.errstate(invalid="ignore"):
            timed = ~np.isnan(start) & ~np.isnan(end) & (end > start)
        gaps = None
        if self.gap_parts is not None:
            gaps = {name: np.concatenate(parts) for name, parts in self.gap_parts.items()}
        return LevelColumns(
            start=start,
            end=end,
            first=joined["first"],
            tokens=joined["tokens"].astype(np.int64),
            warmup=joined["warmup"].astype(bool),
            failed=joined["failed"].astype(bool),
            error_none=joined["error_none"].astype(bool),
            timed=timed,
            first_bad=joined["first_bad"].astype(bool),
            gaps=gaps,
        )


def _key(level: Any, attempt: Any) -> tuple[int, int] | None:
    if not isinstance(level, int) or isinstance(level, bool):
        return None
    valid = isinstance(attempt, int) and not isinstance(attempt, bool)
    return level, attempt if valid else -1


def _gap_figures(row: JsonObject) -> tuple[float, float]:
    """A request's ITL and longest gap (ms) as ``goodput.request_figures`` gives them."""
    try:
        record = RequestRecord.from_json(row, _EPOCH)
    except (KeyError, TypeError):
        return math.inf, math.inf
    if not record.ok or record.first_token is None:
        return math.inf, math.inf
    figures = request_figures(record)
    return figures["itl_ms"], figures["max_gap_ms"]


def _row_columns(rows: list[JsonObject], gaps: bool) -> dict[str, npt.NDArray[Any]]:
    """Columns of rows already parsed (JSON lines, or a compact block decoded whole)."""
    out: dict[str, npt.NDArray[Any]] = {
        "start": np.array([_number(r.get("start")) for r in rows], dtype=np.float64),
        "end": np.array([_number(r.get("end")) for r in rows], dtype=np.float64),
        "first": np.array([_number(r.get("first_token")) for r in rows], dtype=np.float64),
        "tokens": np.array([_tokens(r.get("out")) for r in rows], dtype=np.int64),
        "warmup": np.array([bool(r.get("warmup")) for r in rows], dtype=bool),
        "failed": np.array([bool(r.get("error_kind")) for r in rows], dtype=bool),
        "error_none": np.array([r.get("error_kind") is None for r in rows], dtype=bool),
        "first_bad": np.array([not _first_usable(r) for r in rows], dtype=bool),
    }
    if gaps:
        figures = [_gap_figures(r) for r in rows]
        out["itl_ms"] = np.array([f[0] for f in figures], dtype=np.float64)
        out["max_gap_ms"] = np.array([f[1] for f in figures], dtype=np.float64)
    return out


def _first_usable(row: JsonObject) -> bool:
    """Whether ``RequestRecord.from_json`` reads the row (its id, a numeric or missing first
    token): the goodput points leave out the rows it cannot read."""
    first = row.get("first_token")
    return "id" in row and (first is None or isinstance(first, int | float))


def _tokens(value: Any) -> int:
    return int(value or 0) if isinstance(value, int | float) or value is None else 0


def _column(other: OtherColumns, key: str, n: int, default: Any) -> list[Any]:
    """One of a compact block's other columns, ``default`` in the rows that lack the key."""
    found = other.get(key)
    if found is None:
        return [default] * n
    if isinstance(found, dict):
        values = [default] * n
        for i, v in zip(found["rows"], found["values"], strict=True):
            values[i] = v
        return values
    return list(found)


_ABSENT = object()


def _block_columns(body: bytes) -> tuple[list[Any], list[Any], dict[str, npt.NDArray[Any]]]:
    """A compact block's levels, attempts and columns, without building its rows."""
    payload = zlib.decompress(body)
    head_len, _ = _PAYLOAD.unpack_from(payload)
    columns = json.loads(payload[_PAYLOAD.size : _PAYLOAD.size + head_len])
    n = columns["n"]
    other = columns["other"]
    start_us = np.cumsum(np.array(columns["start"], dtype=np.int64))

    def times(key: str) -> Floats:
        deltas = columns.get(key)
        if deltas is None:
            return np.full(n, math.nan)
        present = np.array([d is not None for d in deltas], dtype=bool)
        us = np.array([0 if d is None else d for d in deltas], dtype=np.int64) + start_us
        return np.where(present, us / 1e6, math.nan)

    error_kind = _column(other, "error_kind", n, None)
    ids = _column(other, "id", n, _ABSENT)
    first = times("first_token")
    out = {
        "start": start_us / 1e6,
        "end": times("end"),
        "first": first,
        "tokens": np.array([_tokens(v) for v in _column(other, "out", n, 0)], dtype=np.int64),
        "warmup": np.array([bool(v) for v in _column(other, "warmup", n, False)], dtype=bool),
        "failed": np.array([bool(v) for v in error_kind], dtype=bool),
        "error_none": np.array([v is None for v in error_kind], dtype=bool),
        "first_bad": np.array([v is _ABSENT for v in ids], dtype=bool),
    }
    return _column(other, "level", n, None), _column(other, "attempt", n, 1), out


def _split(
    builders: dict[tuple[int, int], _Builder],
    levels: list[Any],
    attempts: list[Any],
    columns: dict[str, npt.NDArray[Any]],
    gaps: bool,
) -> int:
    """Append a batch of rows to their levels' builders; the count of unlabelled rows."""
    keys = [_key(level, attempt) for level, attempt in zip(levels, attempts, strict=True)]
    unlabelled = sum(1 for key in keys if key is None)
    distinct = dict.fromkeys(key for key in keys if key is not None)
    for key in distinct:
        mask = np.array([k == key for k in keys], dtype=bool)
        part = columns if len(distinct) == 1 and not unlabelled else _masked(columns, mask)
        builder = builders.get(key)
        if builder is None:
            builder = builders[key] = _Builder(gaps)
        builder.add(part)
    return unlabelled


def _masked(columns: dict[str, npt.NDArray[Any]], mask: Bools) -> dict[str, npt.NDArray[Any]]:
    return {name: values[mask] for name, values in columns.items()}


def read_record_columns(path: Path, *, gaps: bool = False) -> RecordColumns:
    """Every record of ``path`` (either format) as columns per (level, attempt), in one pass;
    a missing file is empty. ``gaps``: also each request's ITL and longest gap (the SLO
    figures that need its token chunks), which a compact file then decodes whole."""
    out = RecordColumns(path=path, gaps=gaps)
    builders: dict[tuple[int, int], _Builder] = {}
    state = ReadState()
    rows_seen = 0
    try:
        with path.open("rb") as f:
            compact = f.read(len(MAGIC)) == MAGIC
        if compact:
            for body in iter_compact_blocks(path, state=state):
                if gaps:
                    rows = decode_block(body)
                    levels = [r.get("level") for r in rows]
                    attempts = [r.get("attempt", 1) for r in rows]
                    columns = _row_columns(rows, gaps)
                else:
                    levels, attempts, columns = _block_columns(body)
                rows_seen += len(levels)
                out.unlabelled += _split(builders, levels, attempts, columns, gaps)
        else:
            batch: list[JsonObject] = []
            for row in iter_jsonl(path, state=state):
                batch.append(row)
                if len(batch) >= 4096:
                    out.unlabelled += _split_rows(builders, batch, gaps)
                    batch = []
            if batch:
                out.unlabelled += _split_rows(builders, batch, gaps)
    except FileNotFoundError:
        out.exists = False
        return out
    out.bad_lines = state.bad_line_numbers(rows_seen)
    out.levels = {key: builder.build() for key, builder in builders.items()}
    return out


def _split_rows(
    builders: dict[tuple[int, int], _Builder], rows: list[JsonObject], gaps: bool
) -> int:
    levels = [r.get("level") for r in rows]
    attempts = [r.get("attempt", 1) for r in rows]
    return _split(builders, levels, attempts, _row_columns(rows, gaps), gaps)
