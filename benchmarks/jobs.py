"""Job handlers of the benchmarks app (sweeps, experiments) register here."""

from __future__ import annotations
