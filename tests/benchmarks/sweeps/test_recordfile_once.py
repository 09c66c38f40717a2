from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchlib.arrays import columns
from benchmarks.sweeps import recordfile


def _write(path: Path, levels: int) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for level in range(levels):
            handle.write(
                json.dumps({"level": level, "attempt": 1, "start": 0.0, "end": 1.0}) + "\n"
            )


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    parsed: list[Path] = []
    real = recordfile.read_record_file

    def counting(path: Path) -> recordfile.RecordFile:
        parsed.append(path)
        return real(path)

    monkeypatch.setattr(recordfile, "read_record_file", counting)
    return parsed


def test_a_file_is_parsed_once_per_block_however_many_levels_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed = _count_parses(monkeypatch)
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    _write(a, 8)
    _write(b, 8)
    with recordfile.records_read_once():
        for level in range(8):
            assert len(recordfile.read_record_file_once(a).level(level, 1)) == 1
            assert len(recordfile.read_record_file_once(b).level(level, 1)) == 1
        with recordfile.records_read_once():  # a nested block shares the outer one's files
            recordfile.read_record_file_once(a)
    assert parsed == [a, b]


def test_a_changed_file_is_parsed_again_and_nothing_is_kept_outside_a_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed = _count_parses(monkeypatch)
    a = tmp_path / "a.jsonl"
    _write(a, 2)
    with recordfile.records_read_once():
        recordfile.read_record_file_once(a)
        _write(a, 3)  # a level appended meanwhile: its size changed
        assert len(recordfile.read_record_file_once(a).by_level) == 3
    recordfile.read_record_file_once(a)
    recordfile.read_record_file_once(a)
    assert len(parsed) == 4


def test_columns_are_read_once_per_block_and_again_when_token_gaps_are_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[tuple[Path, bool]] = []
    real = columns.read_record_columns

    def counting(path: Path, *, gaps: bool = False) -> columns.RecordColumns:
        read.append((path, gaps))
        return real(path, gaps=gaps)

    monkeypatch.setattr(recordfile, "read_record_columns", counting)
    a = tmp_path / "a.jsonl"
    _write(a, 8)
    with recordfile.records_read_once():
        for level in range(8):
            found = recordfile.read_record_columns_once(a).level(level, 1)
            assert found is not None and len(found) == 1
        recordfile.read_record_columns_once(a, gaps=True)  # the first read had no gaps
        recordfile.read_record_columns_once(a)  # the read with gaps serves both
        recordfile.read_record_file_once(a)  # rows are a kind of their own
    assert read == [(a, False), (a, True)]


def test_groups_are_the_runs_of_consecutive_rows_of_one_level_attempt(tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    rows = [
        {"level": 0, "id": "a"},
        {"level": 0, "id": "b"},
        {"id": "no level"},
        {"level": 1, "attempt": 2, "id": "c"},
        {"level": 0, "id": "d"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    scan = recordfile.RecordGroups(path)
    groups = [(key, [r["id"] for r in run]) for key, run in scan.groups()]
    assert groups == [
        ((0, 1), ["a", "b"]),
        (None, ["no level"]),
        ((1, 2), ["c"]),
        ((0, 1), ["d"]),
    ]
    assert scan.exists and scan.bad_lines == [6]
    gone = recordfile.RecordGroups(tmp_path / "gone.jsonl")
    assert list(gone.groups()) == [] and not gone.exists
