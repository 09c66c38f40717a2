"""Statistics of A/B comparisons of concurrency sweeps (plain Python, no Django)."""

from __future__ import annotations

from benchlib.stats.crossover import Crossing, Crossover, find_crossover, interpolate_crossing
from benchlib.stats.engines import EngineOption, speculation_switches
from benchlib.stats.intervals import (
    level_ratio,
    ratio_curve,
    ratio_from_repeats,
)
from benchlib.stats.saturation import Saturation, find_saturation
from benchlib.stats.schedule import Band, Schedule, Step, Variant, derive_schedule
from benchlib.stats.types import (
    Curve,
    LevelRatio,
    LevelSample,
    Ratio,
    RatioCurve,
    RequestPoint,
    level_throughput,
)
from benchlib.stats.verdict import Verdict, compare, compare_all

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
    "speculation_switches",
]
