from __future__ import annotations

# Records files, written as requests complete and read back in bounded memory.
#
# Two formats hold the same rows (the dicts of `RequestRecord.to_json`, plus `attempt`):
#
# - JSON lines (`records.jsonl`), one row per line: what users download and what runs before
#   the compact format wrote.
# - The compact format (suffix `.sdrec`): an 8-byte magic, then self-delimiting blocks, each one
#   batch of rows stored by column and zlib-compressed. Times are integer microseconds (exactly
#   the 1 us rounding of the JSON form): a request's start delta-coded against the previous
#   row's, its other times and its first chunk against its own start, every later chunk against
#   the chunk before. Those deltas are small integers that compress about ten-fold, where the
#   JSON form spells every chunk as a 17-digit epoch time.
#
# Why a block format of our own rather than Parquet: it is standard library only (zlib, struct,
# json), so every process that writes records (a load generator on a shard host included) can
# write it with nothing to install; a block is appended with one write() and carries its length
# and CRC, so a writer killed mid-block leaves whole blocks before a torn tail the reader
# detects and skips, the same property as JSON lines cut mid-line; and a block decodes on its
# own, so readers stream a file of any size a batch at a time.
import itertools
import json
import os
import struct
import time
import zlib
from array import array
from collections.abc import Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib.json_types import JsonObject
from benchlib.loadgen.records import TIME_KEYS, BlockHead, BlockTimes, OtherColumns, RecordRow

MAGIC = b"SDREC01\n"
COMPACT_SUFFIX = ".sdrec"
_BLOCK = struct.Struct("<4sII")  # tag, compressed length, crc32 of the compressed bytes
_BLOCK_TAG = b"SDB1"
_PAYLOAD = struct.Struct("<II")  # columns JSON length, total chunk count
# Rows are flushed to disk every BATCH_ROWS rows or FLUSH_INTERVAL_S seconds, whichever first:
# a crash then loses at most that much of what completed, and memory holds at most one batch.
BATCH_ROWS = 512
FLUSH_INTERVAL_S = 0.5

# The JSON form's key order: the declaration order of `RecordRow`, which `RequestRecord.to_json`
# follows (the CLI's `attempt` last). Rows decoded from the compact form come back in it, so a
# records.jsonl made from them reads the same; read off the one declaration, a key added to the
# record cannot be left out of it.
_KEY_ORDER = tuple(RecordRow.__annotations__)
_ORDER = {k: i for i, k in enumerate(_KEY_ORDER)}


def _us(t: float) -> int:
    # `t` is a JSON time, already rounded to 6 decimals: t * 1e6 is within 0.4 of an integer
    # (0.12 us of representation error at epoch magnitudes plus the product's rounding), and
    # that integer / 1e6 gives back exactly `t` (a correctly rounded division).
    return round(t * 1e6)


def encode_block(rows: Iterable[Mapping[str, Any]]) -> bytes:
    """One block (framing included) holding `rows` (`RecordRow`s, or rows read back from a file
    and tagged, as a split level's union is written)."""
    rows = list(rows)
    n = len(rows)
    starts = [_us(r["start"]) for r in rows]
    start_deltas = [starts[0], *(b - a for a, b in itertools.pairwise(starts))]
    times: BlockTimes = {}
    for time_key in TIME_KEYS:
        values = [r.get(time_key) for r in rows]
        if any(v is not None for v in values):
            times[time_key] = [
                None if v is None else _us(v) - s for v, s in zip(values, starts, strict=True)
            ]
    nchunks: list[int] = []
    gaps = array("q")
    tokens = array("i")
    for r, s in zip(rows, starts, strict=True):
        chunks = r.get("chunks") or []
        nchunks.append(len(chunks))
        prev = s
        for t, k in chunks:
            us = _us(t)
            gaps.append(us - prev)
            tokens.append(k)
            prev = us
    # Every other key by column; a key some rows lack lists the rows that have it.
    keys = sorted({k for r in rows for k in r} - {"start", "chunks", *TIME_KEYS})
    other: OtherColumns = {}
    for key in keys:
        present = [i for i, r in enumerate(rows) if key in r]
        if len(present) == n:
            other[key] = [r[key] for r in rows]
        else:
            other[key] = {"rows": present, "values": [rows[i][key] for i in present]}
    block: BlockHead = {"n": n, "start": start_deltas, **times, "nchunks": nchunks, "other": other}
    head = json.dumps(block, separators=(",", ":")).encode()
    payload = b"".join(
        [_PAYLOAD.pack(len(head), len(gaps)), head, _le(gaps).tobytes(), _le(tokens).tobytes()]
    )
    body = zlib.compress(payload, 6)
    return _BLOCK.pack(_BLOCK_TAG, len(body), zlib.crc32(body)) + body


def _le(values: array[Any]) -> array[Any]:
    """`values` in little-endian byte order (the file's, whatever the machine's)."""
    if struct.pack("=H", 1) != struct.pack("<H", 1):  # pragma: no cover - big-endian hosts
        values = array(values.typecode, values)
        values.byteswap()
    return values


def decode_block(body: bytes) -> list[JsonObject]:
    """The rows of one block's compressed body, in the JSON form's key order."""
    payload = zlib.decompress(body)
    head_len, n_chunks = _PAYLOAD.unpack_from(payload)
    offset = _PAYLOAD.size
    columns: BlockHead = json.loads(payload[offset : offset + head_len])
    offset += head_len
    gaps = _le(array("q", payload[offset : offset + 8 * n_chunks]))
    offset += 8 * n_chunks
    tokens = _le(array("i", payload[offset : offset + 4 * n_chunks]))
    n = columns["n"]
    rows: list[JsonObject] = [{} for _ in range(n)]
    for key, values in columns["other"].items():
        if isinstance(values, dict):
            for i, v in zip(values["rows"], values["values"], strict=True):
                rows[i][key] = v
        else:
            for row, v in zip(rows, values, strict=True):
                row[key] = v
    start = 0
    at = 0
    for i, row in enumerate(rows):
        start += columns["start"][i]
        row["start"] = start / 1e6
        for time_key in TIME_KEYS:
            if time_key in columns:
                delta = columns[time_key][i]
                row[time_key] = None if delta is None else (start + delta) / 1e6
        chunks = []
        t = start
        for j in range(at, at + columns["nchunks"][i]):
            t += gaps[j]
            chunks.append([t / 1e6, tokens[j]])
        at += columns["nchunks"][i]
        row["chunks"] = chunks
    # `sent`/`written` are absent from the JSON form when unknown (not null): keep them absent.
    for row in rows:
        for key in ("sent", "written"):
            if key in row and row[key] is None:
                del row[key]
    return [dict(sorted(row.items(), key=_key_rank)) for row in rows]


def _key_rank(item: tuple[str, object]) -> int:
    return _ORDER.get(item[0], len(_ORDER))


def is_compact(path: Path) -> bool:
    """Whether `path` holds the compact format (by its first bytes; False when missing)."""
    try:
        with path.open("rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except FileNotFoundError:
        return False


@dataclass
class ReadState:
    """What a pass over a records file met besides rows: lines or a tail that did not parse."""

    bad_lines: list[int] = field(default_factory=list)
    torn_tail: bool = False
    end_offset: int = 0

    def bad_line_numbers(self, rows: int) -> list[int]:
        """After a pass that read `rows` rows: the bad lines, a torn tail the row after them."""
        return [*self.bad_lines, rows + 1] if self.torn_tail else list(self.bad_lines)


def iter_compact(
    path: Path, *, offset: int = 0, state: ReadState | None = None
) -> Iterator[dict[str, Any]]:
    """The rows of a compact file from the block at byte `offset` (0: the first); a torn last
    block (a writer killed mid-write) is left out and reported in `state`."""
    for body in iter_compact_blocks(path, offset=offset, state=state):
        yield from decode_block(body)


def iter_compact_blocks(
    path: Path, *, offset: int = 0, state: ReadState | None = None
) -> Iterator[bytes]:
    """Each whole block's compressed body (``decode_block`` reads its rows) from byte `offset`
    (0: the first block); a torn last block is left out and reported in `state`, with the
    offset the whole blocks end at."""
    state = state or ReadState()
    with path.open("rb") as f:
        if offset <= 0:
            if f.read(len(MAGIC)) != MAGIC:
                raise ValueError(f"{path} is not a compact records file")
        else:
            f.seek(offset)
        while True:
            at = f.tell()
            head = f.read(_BLOCK.size)
            if not head:
                state.end_offset = at
                return
            body = b""
            if len(head) == _BLOCK.size:
                tag, length, crc = _BLOCK.unpack(head)
                if tag == _BLOCK_TAG:
                    body = f.read(length)
                    if len(body) != length or zlib.crc32(body) != crc:
                        body = b""
            if not body:
                state.torn_tail = True
                state.end_offset = at
                return
            yield body


def iter_jsonl(
    path: Path, *, offset: int = 0, state: ReadState | None = None
) -> Iterator[dict[str, Any]]:
    """The rows of a JSON-lines file from byte `offset`; lines that are not a JSON object are
    reported by number in `state` (numbers count from `offset`)."""
    state = state or ReadState()
    with path.open("rb") as f:
        f.seek(offset)
        for number, raw in enumerate(f, start=1):
            line = raw.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError:
                state.bad_lines.append(number)
                continue
            if not isinstance(row, dict):
                state.bad_lines.append(number)
                continue
            yield row
        state.end_offset = f.tell()


def iter_rows(
    path: Path, *, offset: int = 0, state: ReadState | None = None
) -> Iterator[dict[str, Any]]:
    """The rows of a records file in either format, one at a time."""
    if is_compact(path):
        return iter_compact(path, offset=offset, state=state)
    return iter_jsonl(path, offset=offset, state=state)


def iter_jsonl_bytes(
    path: Path, *, rows_per_chunk: int = BATCH_ROWS
) -> Generator[bytes, None, None]:
    """The file as JSON lines, a batch of rows at a time: a records.jsonl download of a compact
    file made while it is sent, never held whole."""
    if not is_compact(path):
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                yield chunk
        return
    lines: list[str] = []
    for row in iter_compact(path):
        lines.append(json.dumps(row, separators=(",", ":")) + "\n")
        if len(lines) >= rows_per_chunk:
            yield "".join(lines).encode()
            lines = []
    if lines:
        yield "".join(lines).encode()


def compact_path(path: Path) -> bool:
    """Whether a records file at `path` is to be written in the compact format (its suffix)."""
    return path.suffix == COMPACT_SUFFIX


class RecordWriter:
    """Appends rows to a records file a batch at a time: one write() per batch, after
    BATCH_ROWS rows or FLUSH_INTERVAL_S seconds (the owner calls `flush_if_due` on a timer
    too, so rows never wait on the next completion).

    Each batch is one write() on an O_APPEND descriptor: another writer appending to the same
    file (an earlier attempt still finishing) never gets inside a line or a block.
    """

    def __init__(
        self,
        path: Path,
        *,
        append: bool,
        compact: bool | None = None,
        batch_rows: int = BATCH_ROWS,
        flush_interval: float = FLUSH_INTERVAL_S,
        shared: bool = False,
    ) -> None:
        """``shared``: other processes append to the same file at the same time (a split
        level's workers), so its tail is left alone: the owner prepared it."""
        self.path = path
        self.compact = compact_path(path) if compact is None else compact
        self.batch_rows = batch_rows
        self.flush_interval = flush_interval
        self._rows: list[Mapping[str, Any]] = []
        self._last_flush = time.monotonic()
        self.rows_written = 0
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if append else os.O_TRUNC)
        self._fd = os.open(path, flags, 0o644)
        self._regular = os.path.isfile(path)
        if not shared:
            self._prepare(append)

    def _prepare(self, append: bool) -> None:
        if not self._regular:
            return
        size = os.fstat(self._fd).st_size
        if self.compact:
            if size == 0:
                self._write(MAGIC)
            elif not is_compact(self.path):
                raise ValueError(f"{self.path} exists and is not a compact records file")
            else:
                # A block a killed writer left half-written would hide every block after it.
                cut_torn_block(self.path)
        elif append and size > 0:
            with self.path.open("rb") as f:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    # End the line a killed earlier writer left half-written, so that torn line
                    # never glues onto the next record.
                    self._write(b"\n")

    @property
    def readable(self) -> bool:
        """Whether what is written can be read back (a regular file, not /dev/null or a FIFO)."""
        return self._regular

    def offset(self) -> int:
        """The file's size now: where the rows written from here on begin (after a flush)."""
        return os.fstat(self._fd).st_size

    def write(self, row: Mapping[str, Any]) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.batch_rows:
            self.flush()
        else:
            self.flush_if_due()

    def flush_if_due(self) -> None:
        if self._rows and time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    def flush(self) -> None:
        self._last_flush = time.monotonic()
        if not self._rows:
            return
        rows, self._rows = self._rows, []
        if self.compact:
            data = encode_block(rows)
        else:
            data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows).encode()
        self._write(data)
        self.rows_written += len(rows)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            self.flush()
        finally:
            os.close(self._fd)
            self._fd = -1


def cut_torn_block(path: Path) -> int:
    """Cut a compact file's torn last block (a writer killed mid-write); the bytes cut. Walks
    the block headers and checks each CRC without decompressing anything."""
    with path.open("rb+") as f:
        size = f.seek(0, os.SEEK_END)
        at = len(MAGIC)
        while at < size:
            f.seek(at)
            head = f.read(_BLOCK.size)
            if len(head) < _BLOCK.size:
                break
            tag, length, crc = _BLOCK.unpack(head)
            if tag != _BLOCK_TAG:
                break
            body = f.read(length)
            if len(body) != length or zlib.crc32(body) != crc:
                break
            at += _BLOCK.size + length
        if at < size:
            f.truncate(at)
        return max(0, size - at)


@dataclass(frozen=True)
class RecordTarget:
    """Where a level's records go, in a form another process can open: each file's path and
    whether it is compact, and the attempt to tag rows with."""

    files: tuple[tuple[str, bool], ...]
    attempt: int | None = None

    def open(self) -> list[RecordWriter]:
        """Writers appending to every file beside the process that prepared them."""
        return [
            RecordWriter(Path(path), append=True, compact=compact, shared=True)
            for path, compact in self.files
        ]

    def row(self, record: RecordRow) -> RecordRow:
        if self.attempt is not None:
            record["attempt"] = self.attempt
        return record
