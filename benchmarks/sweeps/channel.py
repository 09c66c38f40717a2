"""The ``sweep.*`` events of a sweep's group on the channel layer (core.realtime), with the
declared shape of each payload. ``benchmarks.sweeps.recording`` sends them after commit;
``benchmarks.sweeps.consumers.SweepConsumer`` forwards them to the sweep page as they are:
``{"type": "sweep.samples", "sweep_id": ..., "samples": [...]}`` on the wire."""

from __future__ import annotations

from typing import TypedDict

from benchmarks.sweeps.rows import LevelRow, LiveSample, SweepProgress, SweepRow
from core.realtime import ChannelEvent


class SweepSamplesPayload(TypedDict):
    sweep_id: int
    samples: list[LiveSample]  # one batch a second (core.realtime.SAMPLE_BATCH_SECONDS)


class SweepLevelPayload(TypedDict):
    """A level started, finished or got its server figures."""

    sweep_id: int
    level: LevelRow
    progress: SweepProgress


class SweepStatePayload(TypedDict):
    sweep_id: int
    sweep: SweepRow
    progress: SweepProgress


SWEEP_SAMPLES = ChannelEvent("sweep.samples", SweepSamplesPayload)
SWEEP_LEVEL = ChannelEvent("sweep.level", SweepLevelPayload)
SWEEP_STATE = ChannelEvent("sweep.state", SweepStatePayload)
