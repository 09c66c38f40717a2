"""Statistics of A/B comparisons of concurrency sweeps (plain Python, no Django)."""

from __future__ import annotations

from benchmarks.stats.crossover import Crossing, Crossover, find_crossover, interpolate_crossing
from benchmarks.stats.engines import EngineOption, speculation_switches
from benchmarks.stats.intervals import (
    level_ratio,
    ratio_curve,
    ratio_from_repeats,
    ratio_from_requests,
)
from benchmarks.stats.saturation import Saturation, find_saturation
from benchmarks.stats.schedule import Band, Schedule, Step, Variant, derive_schedule
from benchmarks.stats.types import (
    Curve,
    LevelRatio,
    LevelSample,
    Ratio,
    RatioCurve,
    RequestPoint,
    level_throughput,
)
from benchmarks.stats.verdict import Verdict, compare, compare_all

__all__ = [
    "Band",
    "Crossing",
    "Crossover",
    "Curve",
    "EngineOption",
    "LevelRatio",
    "LevelSample",
    "Ratio",
    "RatioCurve",
    "RequestPoint",
    "Saturation",
    "Schedule",
    "Step",
    "Variant",
    "Verdict",
    "compare",
    "compare_all",
    "derive_schedule",
    "find_crossover",
    "find_saturation",
    "interpolate_crossing",
    "level_ratio",
    "level_throughput",
    "ratio_curve",
    "ratio_from_repeats",
    "ratio_from_requests",
    "speculation_switches",
]
