"""The experiments' job handler and its hooks register here (imported by
BenchmarksConfig.ready)."""

from __future__ import annotations

from benchmarks.experiments.runner import (
    experiment_on_cancel_forced,
    experiment_on_interrupted,
    run_experiment,
)
from benchmarks.experiments.services import EXPERIMENT_JOB_KIND
from core.jobs import job_handler, on_cancel_forced, on_interrupted

job_handler(EXPERIMENT_JOB_KIND)(run_experiment)
on_interrupted(EXPERIMENT_JOB_KIND)(experiment_on_interrupted)
on_cancel_forced(EXPERIMENT_JOB_KIND)(experiment_on_cancel_forced)
