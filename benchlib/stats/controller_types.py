"""The JSON a level summary keeps of the draft-length controller (``summary["controller"]``),
as ``benchlib.stats.controller.controller_figures`` builds it: times are seconds since the level
opened."""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

Source = Literal["sglang_gauges", "vllm_counters"]


class ControllerSeries(TypedDict):
    """One value per second of the level (None where the second had nothing to read)."""

    t_s: list[float]
    drafted_per_step: list[float | None]
    tokens_per_step: list[float | None]
    acceptance: list[float | None]
    throughput: list[float | None]


class SwitchRow(TypedDict):
    """A ``Switch`` with its times also given from the level's opening."""

    t: float
    window: list[float]
    before: float
    after: float
    throughput_before: float | None
    throughput_after: float | None
    throughput_change: float | None
    acceptance_before: float | None
    acceptance_after: float | None
    acceptance_drop: float | None
    episode: list[float] | None
    episode_switches: int
    t_s: float
    episode_s: list[float] | None


class TierReadings(TypedDict):
    """SGLang's tier read faster than once a second (what fast switch detection used)."""

    interval_s: float
    t_s: list[float]
    drafted_per_step: list[float]


class ControllerFigures(TypedDict):
    source: Source
    interval_s: float
    opened_at: float
    series: ControllerSeries
    switches: list[SwitchRow]
    switches_from: Literal["tier_readings", "series"]
    tier_readings: NotRequired[TierReadings]
    # Added by the load generator's tracker (benchlib.loadgen.controller): the scrapes and
    # tier readings that failed.
    failed_scrapes: NotRequired[int]
    failed_tier_readings: NotRequired[int]
