from __future__ import annotations

import json
import time

import pytest

from benchlib.loadgen.records import ClockAnchor, RequestRecord
from tests.benchlib.loadgen.conftest import make_record, record_with_every_field


def test_anchor_converts_perf_times_to_wall_clock_and_back():
    anchor = ClockAnchor.now()
    assert anchor.to_wall(time.perf_counter()) == pytest.approx(time.time(), abs=0.005)
    t = anchor.t0_perf + 12.5
    assert anchor.to_perf(anchor.to_wall(t)) == pytest.approx(t, abs=1e-6)


def test_shift_between_anchors_keeps_sub_microsecond_precision():
    a = ClockAnchor(t0_wall=1_796_000_000.123456, t0_perf=100.0)
    b = ClockAnchor(t0_wall=1_796_000_000.623456, t0_perf=5100.25)
    # the same instant read on a's clock and on b's clock
    t_a = 150.0
    t_b = t_a + a.shift_to(b)
    assert b.to_wall(t_b) - a.to_wall(t_a) == pytest.approx(0.0, abs=1e-6)
    assert a.shift_to(b) == pytest.approx(5000.25 - 0.5, abs=1e-9)


def test_json_record_round_trips_with_wall_clock_times():
    anchor = ClockAnchor(t0_wall=1_796_000_000.0, t0_perf=50.0)
    rec = make_record("r-1", 50.0, [(50.25, 1), (50.5, 3)], end=50.6, slot=3, process=1)
    rec.chunk_tokens_estimated = True
    line = json.dumps(rec.to_json(anchor, level_index=2))
    d = json.loads(line)
    assert d["level"] == 2
    assert d["start"] == pytest.approx(1_796_000_000.0)
    assert d["chunks"][1] == [pytest.approx(1_796_000_000.5), 3]
    assert d["chunk_est"] is True
    assert "error_kind" not in d
    back = RequestRecord.from_json(d, anchor)
    assert back.chunk_tokens == rec.chunk_tokens
    assert back.chunk_times == pytest.approx(rec.chunk_times, abs=2e-6)
    assert (back.slot, back.process, back.output_tokens) == (3, 1, 4)
    assert back.chunk_tokens_estimated


def test_send_stamps_round_trip_and_shift_with_the_record():
    anchor = ClockAnchor(t0_wall=1_796_000_000.0, t0_perf=50.0)
    rec = make_record("r-2", 50.0, [(50.25, 1)], end=50.3)
    rec.sent, rec.written = 50.001, 50.0015
    d = rec.to_json(anchor, level_index=0)
    assert d["sent"] == pytest.approx(1_796_000_000.001, abs=1e-6)
    assert d["written"] == pytest.approx(1_796_000_000.0015, abs=1e-6)
    back = RequestRecord.from_json(d, anchor)
    assert back.sent == pytest.approx(50.001, abs=2e-6)
    assert back.written == pytest.approx(50.0015, abs=2e-6)
    moved = rec.shifted(10.0)
    assert moved.sent == pytest.approx(60.001)
    assert moved.written == pytest.approx(60.0015)
    plain = make_record("r-3", 50.0, [(50.25, 1)])
    assert "sent" not in plain.to_json(anchor, level_index=0)  # absent when never stamped


def test_a_shifted_record_moves_every_time_and_keeps_every_other_field():
    rec = record_with_every_field("r-4", 50.0)
    anchor = ClockAnchor(t0_wall=1_796_000_000.0, t0_perf=50.0)
    # The same instants read on a clock 8 s ahead: the JSON form (every field) is unchanged.
    ahead = ClockAnchor(t0_wall=anchor.t0_wall, t0_perf=anchor.t0_perf + 8.0)
    moved = rec.shifted(8.0)
    assert moved.to_json(ahead, level_index=0) == rec.to_json(anchor, level_index=0)
    assert moved.chunk_tokens is not rec.chunk_tokens
