"""Reading a sweep's records file (no Django): every line is one request of one level attempt.

The file is append-only. Each run of a sweep (its first and every resume) appends the
records of the levels it ran, each record tagged with the sweep's own level index
(``level``) and the run's number (``attempt``; records written before attempts existed
count as attempt 1). A level's summary stands for exactly one attempt, so its records are
the lines with its index and that attempt; a level cut short and run again leaves its
earlier records in the file, under the earlier attempt, and they are never counted twice.

A line that is not a JSON object (a writer killed mid-line) is reported by line number,
not silently dropped: the audit counts it.

The file is JSON lines or the compact format (``benchlib.loadgen.recordstore``, told apart
by its first bytes); both give the same rows, and every reader here takes either. A compact
file's torn last block (a writer killed mid-block) is reported as the line after its last
whole row.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from benchlib.arrays.columns import RecordColumns, read_record_columns
from benchlib.json_types import JsonObject
from benchlib.loadgen.recordstore import ReadState, cut_torn_block, is_compact, iter_rows

T = TypeVar("T")


def record_attempt(record: JsonObject) -> int:
    value = record.get("attempt", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


# A records file's row as read: a request record's JSON (``RequestRecord.to_json``, whose
# fields benchlib.loadgen.records declares) plus its level and attempt tags. Readers here look
# only at the tags and ``warmup``; the rest goes on to the record's own parser.


@dataclass
class RecordFile:
    """The parsed lines of one records file, grouped by (level index, attempt)."""

    path: Path
    exists: bool = True
    by_level: dict[tuple[int, int], list[JsonObject]] = field(default_factory=dict)
    bad_lines: list[int] = field(default_factory=list)
    unlabelled: int = 0

    def level(self, index: int, attempt: int) -> list[JsonObject]:
        return self.by_level.get((index, attempt), [])

    def measured(self, index: int, attempt: int) -> list[JsonObject]:
        """The level's measured requests (warm-up left out), failed ones included."""
        return [r for r in self.level(index, attempt) if not r.get("warmup")]


def read_record_file(path: Path) -> RecordFile:
    """Every record of ``path`` grouped by (level, attempt); a missing file is empty."""
    out = RecordFile(path=path)
    state = ReadState()
    try:
        rows = 0
        for record in iter_rows(path, state=state):
            rows += 1
            level = record.get("level")
            if not isinstance(level, int) or isinstance(level, bool):
                out.unlabelled += 1
                continue
            out.by_level.setdefault((level, record_attempt(record)), []).append(record)
    except FileNotFoundError:
        out.exists = False
        return out
    out.bad_lines = list(state.bad_lines)
    if state.torn_tail:
        out.bad_lines.append(rows + 1)
    return out


@dataclass
class RecordGroups:
    """A pass over a records file a level at a time: runs of consecutive rows of one
    (level, attempt) (``None``: rows with no level index), and after it what else it met."""

    path: Path
    exists: bool = True
    bad_lines: list[int] = field(default_factory=list)

    def groups(self) -> Iterator[tuple[tuple[int, int] | None, list[JsonObject]]]:
        """Each run of consecutive rows with the same key, in file order (a level's rows are
        consecutive unless two writers interleaved them: a key may then come back). Memory is
        one run; ``exists`` and ``bad_lines`` are set once the pass ends."""
        state = ReadState()
        key: tuple[int, int] | None = None
        run: list[JsonObject] = []
        rows = 0
        try:
            for record in iter_rows(self.path, state=state):
                rows += 1
                level = record.get("level")
                found = None
                if isinstance(level, int) and not isinstance(level, bool):
                    found = (level, record_attempt(record))
                if run and found != key:
                    yield key, run
                    run = []
                key = found
                run.append(record)
        except FileNotFoundError:
            self.exists = False
            return
        if run:
            yield key, run
        self.bad_lines = list(state.bad_lines)
        if state.torn_tail:
            self.bad_lines.append(rows + 1)


@dataclass
class MeasuredCounts:
    """How a level attempt's measured requests (warm-up left out) ended, by its records."""

    ok: int = 0
    failed: int = 0


def attempt_counts(path: Path) -> dict[tuple[int, int], MeasuredCounts]:
    """Every (level, attempt) the file holds records of, with its measured requests' counts
    as the audit counts them; {} when the file is gone."""
    counts: dict[tuple[int, int], MeasuredCounts] = {}
    for key, rows in RecordGroups(path).groups():
        if key is None:
            continue
        tally = counts.setdefault(key, MeasuredCounts())
        for row in rows:
            if row.get("warmup"):
                continue
            if row.get("error_kind"):
                tally.failed += 1
            else:
                tally.ok += 1
    return counts


def iter_level_records(path: Path, index: int, attempt: int) -> Iterator[JsonObject]:
    """The records of one level attempt, one at a time, in either format (memory bounded by
    one block of the compact format or one line); nothing when the file is missing."""
    try:
        for record in iter_rows(path):
            if record.get("level") == index and record_attempt(record) == attempt:
                yield record
    except FileNotFoundError:
        return


def trim_torn_tail(path: Path) -> int:
    """Cut a last line that has no newline (a writer stopped mid-record: the disk filled, or
    it was killed) so the next run appends whole lines after whole lines; the bytes cut, 0
    when the file ends cleanly or is missing. In a compact file, its torn last block."""
    if is_compact(path):
        return cut_torn_block(path)
    try:
        with path.open("rb+") as handle:
            size = handle.seek(0, 2)
            end = size
            while end > 0:
                start = max(0, end - 65536)
                handle.seek(start)
                chunk = handle.read(end - start)
                newline = chunk.rfind(b"\n")
                if newline >= 0:
                    end = start + newline + 1
                    break
                end = start
            if end < size:
                handle.truncate(end)
            return size - end
    except FileNotFoundError:
        return 0


DISK_FULL_MARKERS = ("[Errno 28]", "No space left on device", "[Errno 122]", "Disk quota exceeded")


def disk_full(text: str) -> bool:
    """Whether an error text says the disk (or the quota) is full."""
    return any(marker in text for marker in DISK_FULL_MARKERS)


def disk_full_reason(records_path: Path | str) -> str:
    """The sweep's reason when the disk holding its records filled: not a traceback, the one
    fact an operator needs and what to do about it."""
    return (
        f"the disk holding the records is full (no space left writing {records_path}); "
        "free space, then resume the sweep: the completed levels are kept"
    )


# One pass per records file per build: a comparison reads each level of each arm (and again
# for goodput, latency and the schedule), which parsed the whole file once per level (53% of
# a comparison's time at 10k requests). Inside ``records_read_once()`` a file is read once
# and kept while unchanged (same size and mtime); the two most recent files of each kind are
# kept, the two arms a comparison alternates between, so memory stays at two read files:
# their rows (``read_record_file``, what the audit recomputes a level's summary from) or their
# columns (``benchlib.arrays.columns``, all the comparison reads of each request).
_ONCE_KEEP = 2
_once: ContextVar[OrderedDict[tuple[str, str, int, int], Any] | None] = ContextVar(
    "record_files_read_once", default=None
)


@contextmanager
def records_read_once() -> Iterator[None]:
    """Within the block, ``read_record_file_once`` and ``read_record_columns_once`` read each
    unchanged file once (a block inside another shares the outer one's files)."""
    if _once.get() is not None:
        yield
        return
    token = _once.set(OrderedDict())
    try:
        yield
    finally:
        _once.reset(token)


def _read_once(kind: str, path: Path, read: Callable[[], T], fits: Callable[[T], bool]) -> T:
    cache = _once.get()
    if cache is None:
        return read()
    try:
        stat = path.stat()
    except FileNotFoundError:
        return read()
    key = (kind, str(path), stat.st_mtime_ns, stat.st_size)
    found = cache.get(key)
    if found is None or not fits(found):
        found = read()
        cache[key] = found
        same_kind = [k for k in cache if k[0] == kind]
        for old in same_kind[: max(0, len(same_kind) - _ONCE_KEEP)]:
            del cache[old]
    cache.move_to_end(key)
    result: T = found
    return result


def read_record_file_once(path: Path) -> RecordFile:
    """``read_record_file(path)``, parsed once per ``records_read_once()`` block (a new parse
    outside one, or when the file changed since)."""
    return _read_once("rows", path, lambda: read_record_file(path), lambda _: True)


def read_record_columns_once(path: Path, *, gaps: bool = False) -> RecordColumns:
    """``read_record_columns(path)``, read once per ``records_read_once()`` block (again when
    ``gaps`` is asked of a file first read without them)."""
    return _read_once(
        "columns",
        path,
        lambda: read_record_columns(path, gaps=gaps),
        lambda found: found.gaps or not gaps,
    )
