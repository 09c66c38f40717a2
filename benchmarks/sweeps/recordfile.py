"""Reading a sweep's records file (no Django): every line is one request of one level attempt.

The file is append-only. Each run of a sweep (its first and every resume) appends the
records of the levels it ran, each record tagged with the sweep's own level index
(``level``) and the run's number (``attempt``; records written before attempts existed
count as attempt 1). A level's summary stands for exactly one attempt, so its records are
the lines with its index and that attempt; a level cut short and run again leaves its
earlier records in the file, under the earlier attempt, and they are never counted twice.

A line that is not a JSON object (a writer killed mid-line) is reported by line number,
not silently dropped: the audit counts it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def record_attempt(record: dict[str, Any]) -> int:
    value = record.get("attempt", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


@dataclass
class RecordFile:
    """The parsed lines of one records file, grouped by (level index, attempt)."""

    path: Path
    exists: bool = True
    by_level: dict[tuple[int, int], list[dict[str, Any]]] = field(default_factory=dict)
    bad_lines: list[int] = field(default_factory=list)
    unlabelled: int = 0

    def level(self, index: int, attempt: int) -> list[dict[str, Any]]:
        return self.by_level.get((index, attempt), [])

    def measured(self, index: int, attempt: int) -> list[dict[str, Any]]:
        """The level's measured requests (warm-up left out), failed ones included."""
        return [r for r in self.level(index, attempt) if not r.get("warmup")]


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with path.open(encoding="utf-8", errors="replace") as handle:
        yield from enumerate(handle, start=1)


def read_record_file(path: Path) -> RecordFile:
    """Every record of ``path`` grouped by (level, attempt); a missing file is empty."""
    out = RecordFile(path=path)
    try:
        lines = list(_lines(path))
    except FileNotFoundError:
        out.exists = False
        return out
    for number, line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            out.bad_lines.append(number)
            continue
        if not isinstance(record, dict):
            out.bad_lines.append(number)
            continue
        level = record.get("level")
        if not isinstance(level, int) or isinstance(level, bool):
            out.unlabelled += 1
            continue
        out.by_level.setdefault((level, record_attempt(record)), []).append(record)
    return out
