from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from benchlib.loadgen.events import LoadgenEvent, SampleEvent
from benchlib.loadgen.summary import LevelSummary
from benchmarks.sweeps import recording, services
from benchmarks.sweeps.events import SweepRecorder
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepSample
from benchmarks.sweeps.runner import parse_event
from tests.benchmarks.conftest import level_summary_event, load, sample_event


class RecordingStore:
    """Records what the recorder asked to persist, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def level_started(self, *, sweep_id: int, index: int, concurrency: int, t: float) -> None:
        self.calls.append(("level_started", (index, concurrency)))

    async def level_finished(self, *, sweep_id: int, summary: LevelSummary) -> None:
        self.calls.append(("level_finished", summary["level_index"]))

    async def samples_add(self, *, sweep_id: int, samples: list[SampleEvent]) -> None:
        self.calls.append(("samples", [s["t"] for s in samples]))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_samples_are_sent_in_batches_about_once_a_second() -> None:
    store, clock = RecordingStore(), Clock()
    recorder = SweepRecorder(1, store=store, batch_seconds=1.0, clock=clock)
    for t in (0.2, 0.5, 0.9):
        clock.now = t
        await recorder.handle(sample_event(0, t))
    assert store.calls == []
    clock.now = 1.05
    await recorder.handle(sample_event(0, 1.05))
    clock.now = 1.5
    await recorder.handle(sample_event(0, 1.5))
    assert store.calls == [("samples", [0.2, 0.5, 0.9, 1.05])]
    clock.now = 2.1
    await recorder.flush_if_due()  # the job's ticker flushes a quiet buffer
    assert store.calls[-1] == ("samples", [1.5])


async def test_level_events_flush_earlier_samples_first_and_keep_the_order() -> None:
    store, clock = RecordingStore(), Clock()
    recorder = SweepRecorder(1, store=store, clock=clock)
    events: list[LoadgenEvent] = [
        {"event": "run_start", "run_id": "r", "t": 1.0, "params": {}},
        {"event": "level_start", "level_index": 0, "concurrency": 1, "t": 1.0},
        sample_event(0, 1.1),
        level_summary_event(0, 1),
        {"event": "level_start", "level_index": 1, "concurrency": 4, "t": 2.0},
        sample_event(1, 2.1),
        {"event": "level_error", "level_index": 1, "reason": "server gone"},
        level_summary_event(1, 4, status="failed"),
        {"event": "run_end", "status": "failed", "reason": "server gone", "t": 3.0, "levels": 2},
    ]
    for event in events:
        await recorder.handle(event)
    assert store.calls == [
        ("level_started", (0, 1)),
        ("samples", [1.1]),
        ("level_finished", 0),
        ("level_started", (1, 4)),
        ("samples", [2.1]),
        ("level_finished", 1),
    ]
    assert recorder.run_end is not None and recorder.run_end["status"] == "failed"
    assert recorder.level_errors == ["server gone"] and recorder.levels_finished == 2


def test_parse_event_skips_lines_that_are_not_events() -> None:
    assert parse_event(b'{"event":"run_end","status":"completed"}\n') == {
        "event": "run_end", "status": "completed",
    }  # fmt: skip
    assert parse_event(b"\n") is None
    assert parse_event(b"Traceback (most recent call last):\n") is None
    assert parse_event(b'["event"]\n') is None


@pytest.mark.django_db(transaction=True)
async def test_hand_written_event_lines_are_persisted_with_a_partial_level_on_cancel(
    ready_instance: Any,
) -> None:
    sweep = await sync_to_async(services.sweep_create)(
        instance=ready_instance, levels=[1, 4], load=load()
    )
    await sync_to_async(recording.sweep_begin)(sweep_id=sweep.pk)
    lines = [
        {"event": "run_start", "run_id": "r", "t": 1.7e9, "params": {}},
        {"event": "level_start", "level_index": 0, "concurrency": 1, "t": 1.7e9},
        sample_event(0, 1.7e9 + 1),
        sample_event(0, 1.7e9 + 2),
        level_summary_event(0, 1, tok_s=321.0),
        {"event": "level_start", "level_index": 1, "concurrency": 4, "t": 1.7e9 + 3},
        sample_event(1, 1.7e9 + 4, in_flight=4),
        level_summary_event(1, 4, status="cancelled", ok=3),
        {
            "event": "run_end",
            "status": "cancelled",
            "reason": "cancelled by signal",
            "t": 1.7e9 + 5,
        },
    ]
    recorder = SweepRecorder(sweep.pk, batch_seconds=3600)
    for line in lines:
        event = parse_event(json.dumps(line).encode() + b"\n")
        assert event is not None
        await recorder.handle(event)

    def check() -> None:
        levels = {lv.index: lv for lv in SweepLevel.objects.filter(sweep=sweep)}
        assert levels[0].state == LevelState.COMPLETED and levels[0].output_tok_s == 321.0
        assert levels[0].ttft_p50_ms == 20.0 and levels[0].requests_ok == 10
        assert levels[1].state == LevelState.PARTIAL and levels[1].requests_ok == 3
        assert levels[1].reason == "cancelled by test"
        samples = list(SweepSample.objects.filter(sweep=sweep).order_by("t"))
        assert [(s.level_index, s.data["in_flight"]) for s in samples] == [(0, 2), (0, 2), (1, 4)]
        assert "event" not in samples[0].data and samples[0].data["tok_s"] == 100.0
        assert Sweep.objects.get(pk=sweep.pk).current_level_index == 1

    await sync_to_async(check)()
