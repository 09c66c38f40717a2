from __future__ import annotations

from benchmarks.models.experiments import (
    BreakevenCheck,
    Experiment,
    ExperimentArm,
    ExperimentStep,
    StepState,
)
from benchmarks.models.sweeps import LevelState, Sweep, SweepLevel, SweepSample, SweepState

__all__ = [
    "BreakevenCheck",
    "Experiment",
    "ExperimentArm",
    "ExperimentStep",
    "LevelState",
    "StepState",
    "Sweep",
    "SweepLevel",
    "SweepSample",
    "SweepState",
]
