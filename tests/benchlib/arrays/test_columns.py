"""A records file read as columns gives the figures of its parsed rows, bit for bit, in both
formats: the points, throughput, achieved concurrency, batch-means windows and blocks, the
median TPOT, goodput under SLOs (token gaps included), and what the pass met besides rows."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from benchlib.arrays.columns import RequestArrays, read_record_columns
from benchlib.loadgen.goodput import Slo
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.recordstore import RecordWriter
from benchlib.stats import batch_means
from benchlib.stats.types import RequestPoint, level_throughput
from benchmarks.experiments.decisions import tpot_statistic
from benchmarks.experiments.records import request_points
from benchmarks.experiments.workload import goodput_points
from benchmarks.sweeps.recordfile import read_record_file

ANCHOR = ClockAnchor(t0_wall=1_765_000_000.0, t0_perf=0.0)
SLOS = [
    Slo(ttft_ms=60.0, e2e_ms=2500.0),
    Slo(tpot_ms=9.0),
    Slo(itl_ms=9.5, max_gap_ms=40.0),
    Slo(ttft_ms=50.0, itl_ms=10.0, scope="request", attainment=0.9),
]


def _rows(seed: int) -> list[Mapping[str, Any]]:
    """Three levels (one with a second attempt) of closed-loop requests with token chunks
    bunched like a speculative server's, warm-ups, failures, a request with no first token,
    ties on start and end, and an unlabelled row."""
    rng = random.Random(seed)
    rows: list[Mapping[str, Any]] = []
    for level, concurrency, attempt, n in ((0, 1, 1, 40), (1, 4, 1, 300), (1, 4, 2, 301),
                                           (2, 16, 1, 900)):  # fmt: skip
        clocks = [10.0 * level] * concurrency
        for i in range(n):
            slot = i % concurrency
            start = clocks[slot]
            duration = rng.uniform(0.2, 2.0) * concurrency**0.3
            clocks[slot] = start + duration
            first = start + duration * rng.uniform(0.02, 0.1)
            k = rng.randint(1, 24)
            times = sorted(rng.uniform(first, start + duration) for _ in range(k))
            tokens = [rng.choice((1, 1, 2, 3)) for _ in range(k)]
            record = RequestRecord(
                request_id=f"{level}-{attempt}-{i}", slot=slot, start=start, end=start + duration,
                first_token=first, chunk_times=times, chunk_tokens=tokens,
                output_tokens=sum(tokens), warmup=i < 3, category=rng.choice(("chat", "code")),
            )  # fmt: skip
            if i % 37 == 5:
                record.error_kind, record.error = "http", "503"
            if i % 53 == 7:
                record.first_token, record.chunk_times, record.chunk_tokens = None, [], []
            row = record.to_json(ANCHOR, level_index=level)
            row["attempt"] = attempt
            rows.append(row)
            if i % 97 == 11:
                rows.append(dict(row, id=f"{row['id']}-twin"))  # the same start and end
    rows.append({"id": "stray", "start": 1.0, "end": 2.0, "out": 3})
    return rows


@pytest.fixture(params=["jsonl", "compact"])
def records_file(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / ("records.sdrec" if request.param == "compact" else "records.jsonl")
    writer = RecordWriter(path, append=False, batch_rows=128)
    for row in _rows(seed=3):
        writer.write(row)
    writer.close()
    return path


def _points(arrays: RequestArrays) -> list[RequestPoint]:
    return list(arrays)


def test_the_levels_points_are_the_parsed_rows_points_exactly(records_file: Path) -> None:
    rows = read_record_file(records_file)
    columns = read_record_columns(records_file)
    assert sorted(columns.levels) == sorted(rows.by_level) == [(0, 1), (1, 1), (1, 2), (2, 1)]
    assert columns.unlabelled == rows.unlabelled == 1
    for key, level_rows in rows.by_level.items():
        arrays = columns.levels[key].requests()
        reference = request_points(level_rows)
        assert _points(arrays) == reference
        assert arrays.throughput() == level_throughput(reference)
        assert arrays.total_tokens() == sum(p.output_tokens for p in reference)
        assert tpot_statistic(arrays) == tpot_statistic(reference)


def test_batch_means_over_columns_are_the_loops_figures(records_file: Path) -> None:
    rows = read_record_file(records_file)
    columns = read_record_columns(records_file)
    for key, level_rows in rows.by_level.items():
        arrays, reference = columns.levels[key].requests(), request_points(level_rows)
        assert batch_means.achieved_concurrency(arrays) == batch_means.achieved_concurrency(
            reference
        )
        for k in (3, 7, 10):
            assert batch_means.window_throughputs(arrays, k) == batch_means.window_throughputs(
                reference, k
            )
        assert [_points(b) for b in batch_means.time_blocks(arrays)] == [  # type: ignore[arg-type]
            list(b) for b in batch_means.time_blocks(reference)
        ]
        assert batch_means.log_block_spread(arrays) == batch_means.log_block_spread(reference)
        assert batch_means.log_block_spread(arrays, tpot_statistic) == (
            batch_means.log_block_spread(reference, tpot_statistic)
        )


@pytest.mark.parametrize("slo", SLOS, ids=lambda s: ",".join(s.limits()))
def test_goodput_points_from_columns_are_the_rows_points(records_file: Path, slo: Slo) -> None:
    rows = read_record_file(records_file)
    columns = read_record_columns(records_file, gaps=True)
    met = 0
    for key, level_rows in rows.by_level.items():
        reference = goodput_points(level_rows, slo)
        arrays = columns.levels[key].goodput_requests(slo)
        assert [(p.start, p.end, p.output_tokens) for p in arrays] == [
            (p.start, p.end, p.output_tokens) for p in reference
        ]
        met += sum(1 for p in reference if p.output_tokens)
    # The SLOs are set so that some requests meet them and some do not.
    assert 0 < met < sum(len(r) for r in rows.by_level.values())


def test_an_slo_on_token_gaps_needs_the_gaps_read(records_file: Path) -> None:
    level = read_record_columns(records_file).levels[(2, 1)]
    with pytest.raises(ValueError, match="gaps=True"):
        level.goodput_requests(Slo(max_gap_ms=40.0))


def test_a_torn_tail_and_a_bad_line_are_reported_as_the_row_reader_does(tmp_path: Path) -> None:
    rows = _rows(seed=4)[:200]
    jsonl = tmp_path / "records.jsonl"
    lines = [json.dumps(r) for r in rows]
    jsonl.write_text("\n".join([*lines[:50], "not json", *lines[50:]]) + '\n{"level": 1, "id')
    compact = tmp_path / "records.sdrec"
    writer = RecordWriter(compact, append=False, batch_rows=64)
    for row in rows:
        writer.write(row)
    writer.close()
    with compact.open("ab") as f:
        f.write(b"SDB1\x40\x00\x00\x00torn")
    for path in (jsonl, compact):
        columns, parsed = read_record_columns(path), read_record_file(path)
        assert columns.bad_lines == parsed.bad_lines != []
        assert {k: len(v) for k, v in columns.levels.items()} == {
            k: len(v) for k, v in parsed.by_level.items()
        }


def test_a_missing_file_reads_as_empty(tmp_path: Path) -> None:
    columns = read_record_columns(tmp_path / "gone.jsonl")
    assert not columns.exists and columns.levels == {}


def test_columns_are_read_only(records_file: Path) -> None:
    arrays = read_record_columns(records_file).levels[(1, 1)].requests()
    with pytest.raises(ValueError, match="read-only"):
        arrays.start[0] = 0.0
