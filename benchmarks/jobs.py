"""Job handlers of the benchmarks app (sweeps, experiments) register here."""

from __future__ import annotations

from benchmarks.services import SWEEP_JOB_KIND
from benchmarks.sweeps.handler import run_sweep, sweep_on_interrupted
from hosts.jobs import job_handler, on_interrupted

job_handler(SWEEP_JOB_KIND)(run_sweep)
on_interrupted(SWEEP_JOB_KIND)(sweep_on_interrupted)
