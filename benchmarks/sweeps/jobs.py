"""The sweeps' job handlers (a sweep, a sweep's shard) and the app's periodic housekeeping
register here (imported by BenchmarksConfig.ready)."""

from __future__ import annotations

from django.conf import settings

from benchmarks.sweeps.handler import run_sweep, sweep_on_cancel_forced, sweep_on_interrupted
from benchmarks.sweeps.retention import retention_run
from benchmarks.sweeps.services import SWEEP_JOB_KIND
from benchmarks.sweeps.shards import SHARD_JOB_KIND, run_shard
from core.jobs import job_handler, on_cancel_forced, on_interrupted, periodic_task

job_handler(SWEEP_JOB_KIND)(run_sweep)
on_interrupted(SWEEP_JOB_KIND)(sweep_on_interrupted)
on_cancel_forced(SWEEP_JOB_KIND)(sweep_on_cancel_forced)
job_handler(SHARD_JOB_KIND)(run_shard)
periodic_task("benchmarks.retention", interval_s=lambda: settings.SPECDASH_RETENTION_INTERVAL_S)(
    retention_run
)
