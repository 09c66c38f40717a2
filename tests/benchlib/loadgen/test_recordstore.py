from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from benchlib.loadgen.goodput import Slo
from benchlib.loadgen.metrics import summarize_level, summarize_level_passes
from benchlib.loadgen.records import ClockAnchor, RecordRow, RequestRecord
from benchlib.loadgen.recordstore import (
    MAGIC,
    ReadState,
    RecordWriter,
    iter_jsonl_bytes,
    iter_rows,
)
from benchmarks.sweeps.recordfile import read_record_file, trim_torn_tail
from tests.benchlib.loadgen.conftest import record_with_every_field

ANCHOR = ClockAnchor(t0_wall=1_767_225_600.25, t0_perf=5123.5)


def _records(n: int, *, seed: int = 7) -> list[RequestRecord]:
    """Records of every shape the client writes: several tokens per chunk, tight bursts that
    make deliveries, failures, cancellations, warm-ups, unknown send times, spec figures."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        start = 5124.0 + rng.uniform(0, 60)
        t = start + rng.uniform(0.01, 0.2)
        times, tokens = [], []
        for _ in range(rng.randint(0, 40)):
            t += rng.choice([rng.uniform(0, 0.003), rng.uniform(0.005, 0.05)])
            times.append(t)
            tokens.append(rng.choice([1, 1, 2, 3, 4]))
        error = rng.choice([None] * 8 + ["http", "cancelled"])
        sent = None if i % 5 == 0 else start + 0.0004
        out.append(
            RequestRecord(
                request_id=f"run-2-{'w' if i % 17 == 0 else ''}{i}",
                slot=i % 32,
                process=i % 2,
                warmup=i % 17 == 0,
                start=start,
                end=t + 0.004,
                sent=sent,
                written=None if sent is None else sent + 0.0002,
                first_token=times[0] if times else None,
                chunk_times=times,
                chunk_tokens=tokens,
                output_tokens=sum(tokens),
                prompt_tokens=None if i % 11 == 0 else 120 + i % 7,
                output_tokens_estimated=i % 13 == 0,
                chunk_tokens_estimated=i % 13 == 0,
                finish_reason=None if error else "length",
                error_kind=error,
                error=error and f"{error} went wrong",
                retries=1 if i % 19 == 0 else 0,
                category=rng.choice([None, "chat", "code"]),
                spec_steps=rng.choice([None, 12]),
                spec_drafted=rng.choice([None, 30]),
                spec_accepted=rng.choice([None, 21]),
            )
        )
    return out


def _rows(records: list[RequestRecord], attempt: int | None = 3) -> list[RecordRow]:
    rows = []
    for rec in records:
        row = rec.to_json(ANCHOR, level_index=2)
        if attempt is not None:
            row["attempt"] = attempt
        rows.append(row)
    return rows


def _write(
    path: Path, rows: Sequence[Mapping[str, Any]], *, batch_rows: int = 64, append: bool = False
) -> None:
    writer = RecordWriter(path, append=append, batch_rows=batch_rows)
    for row in rows:
        writer.write(row)
    writer.close()


def test_compact_rows_read_back_equal_to_the_json_form_key_order_included(tmp_path):
    rows = _rows(_records(500))
    path = tmp_path / "records.sdrec"
    _write(path, rows)
    assert path.read_bytes().startswith(MAGIC)
    back = list(iter_rows(path))
    assert back == rows
    assert [list(r) for r in back] == [list(r) for r in rows]
    # The download of a compact file is the JSON lines the old writer would have written.
    text = b"".join(iter_jsonl_bytes(path, rows_per_chunk=50)).decode()
    assert text == "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows)


def test_a_row_with_every_record_key_reads_back_from_the_compact_form_in_the_json_order(
    tmp_path,
):
    # Every optional key set: one the decoder's order lacked would come back after the others
    # (where its fallback puts it), not where the JSON form has it.
    record = record_with_every_field("run-2-0", 5125.0)
    (row,) = _rows([record])
    assert list(row) == list(RecordRow.__annotations__), "the record leaves a key unset"
    path = tmp_path / "records.sdrec"
    _write(path, [row])
    (back,) = iter_rows(path)
    assert list(back) == list(row)
    assert back == row


def test_json_lines_and_compact_files_read_the_same_through_one_reader(tmp_path):
    rows = _rows(_records(300))
    _write(tmp_path / "a.jsonl", rows)
    _write(tmp_path / "a.sdrec", rows)
    jsonl, compact = read_record_file(tmp_path / "a.jsonl"), read_record_file(tmp_path / "a.sdrec")
    assert jsonl.by_level == compact.by_level
    assert list(jsonl.by_level) == [(2, 3)]
    assert len(compact.measured(2, 3)) == sum(1 for r in rows if not r.get("warmup"))
    assert jsonl.bad_lines == compact.bad_lines == []


def test_a_torn_last_block_is_reported_skipped_and_cut_before_the_next_append(tmp_path):
    rows = _rows(_records(200))
    path = tmp_path / "records.sdrec"
    _write(path, rows[:128], batch_rows=64)
    whole = path.stat().st_size
    _write(path, rows[128:192], batch_rows=64, append=True)
    with path.open("rb+") as f:  # a writer killed in the middle of its third block
        f.truncate(whole + (path.stat().st_size - whole) // 2)
    state = ReadState()
    assert list(iter_rows(path, state=state)) == rows[:128]
    assert state.torn_tail
    assert read_record_file(path).bad_lines == [129]
    # A resumed writer appends after the whole blocks, not after the torn one.
    _write(path, rows[128:], append=True)
    state = ReadState()
    assert list(iter_rows(path, state=state)) == rows
    assert not state.torn_tail
    assert trim_torn_tail(path) == 0


def test_rows_reach_the_disk_per_batch_not_at_the_end(tmp_path):
    rows = _rows(_records(10))
    path = tmp_path / "records.sdrec"
    writer = RecordWriter(path, append=False, batch_rows=4, flush_interval=3600)
    for row in rows[:6]:
        writer.write(row)
    assert list(iter_rows(path)) == rows[:4]  # one whole batch, the rest still buffered
    writer.flush_if_due()
    assert len(list(iter_rows(path))) == 4
    writer.flush_interval = 0.0
    writer.flush_if_due()
    assert list(iter_rows(path)) == rows[:6]
    writer.close()


@pytest.mark.parametrize("mode", ["closed", "rate"])
@pytest.mark.parametrize("suffix", [".sdrec", ".jsonl"])
def test_the_summary_read_back_from_the_file_in_passes_equals_the_summary_of_the_list(
    tmp_path, mode, suffix
):
    records = _records(1500, seed=11)
    path = tmp_path / f"records{suffix}"
    _write(path, _rows(records))
    stored = [RequestRecord.from_json(r, ANCHOR) for r in _rows(records)]
    passes = 0

    def source():
        nonlocal passes
        passes += 1
        return (RequestRecord.from_json(row, ANCHOR) for row in iter_rows(path))

    slo = Slo.from_dict({"ttft_ms": 150, "itl_ms": 20})
    expected = summarize_level(stored, concurrency=16, mode=mode, anchor=ANCHOR, slo=slo)
    got = summarize_level_passes(source, concurrency=16, mode=mode, anchor=ANCHOR, slo=slo)
    assert got == expected
    assert repr(got) == repr(expected)  # plain floats, never numpy scalars
    assert passes == 4
