"""Job handlers of the benchmarks app (sweeps, experiments) and its periodic housekeeping
register here."""

from __future__ import annotations

from django.conf import settings

from benchmarks.experiments.runner import (
    experiment_on_cancel_forced,
    experiment_on_interrupted,
    run_experiment,
)
from benchmarks.experiments.services import EXPERIMENT_JOB_KIND
from benchmarks.retention import retention_run
from benchmarks.services import SWEEP_JOB_KIND
from benchmarks.sweeps.handler import run_sweep, sweep_on_cancel_forced, sweep_on_interrupted
from benchmarks.sweeps.shards import SHARD_JOB_KIND, run_shard
from core.jobs import job_handler, on_cancel_forced, on_interrupted, periodic_task

job_handler(SWEEP_JOB_KIND)(run_sweep)
on_interrupted(SWEEP_JOB_KIND)(sweep_on_interrupted)
on_cancel_forced(SWEEP_JOB_KIND)(sweep_on_cancel_forced)
job_handler(SHARD_JOB_KIND)(run_shard)
job_handler(EXPERIMENT_JOB_KIND)(run_experiment)
on_interrupted(EXPERIMENT_JOB_KIND)(experiment_on_interrupted)
on_cancel_forced(EXPERIMENT_JOB_KIND)(experiment_on_cancel_forced)
periodic_task("benchmarks.retention", interval_s=lambda: settings.SPECDASH_RETENTION_INTERVAL_S)(
    retention_run
)
