"""Retention: what the database keeps of finished work (docs/operations.md, "Records and
retention").

- Job events of jobs finished more than SPECDASH_RETAIN_JOB_EVENTS_DAYS ago are deleted (the
  job row, its state, result and error stay).
- The per-request rows a shard job streams to its coordinator (job events of kind
  ``record``) are deleted SPECDASH_RETAIN_SHARD_RECORDS_S after the shard job finished: by
  then the coordinator has copied them into the sweep's records file, the copy that counts.
- A sweep's live samples are thinned, SPECDASH_RETAIN_SAMPLES_DAYS after it finished, to at
  most one per level every SPECDASH_RETAIN_SAMPLE_STEP_S seconds: the history chart keeps its
  shape at a tenth of the rows. The worker thins sweeps that crossed that age in the last
  SAMPLE_SCAN_WINDOW (a run never rescans every sweep); ``manage.py retention --all`` scans
  them all (after the worker was off for longer than that, or when the step changes).

The job worker runs it every SPECDASH_RETENTION_INTERVAL_S; every step is idempotent, so
several workers running it is harmless. Deletes go in batches, so no transaction holds
the database for long.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import QuerySet
from django.utils import timezone

from benchmarks.sweeps.models import FINISHED_SWEEP_STATES, Sweep, SweepSample
from benchmarks.sweeps.shards import RECORD, SHARD_JOB_KIND
from core.models import FINISHED_JOB_STATES, Job, JobEvent

SAMPLE_SCAN_WINDOW = timedelta(days=7)
DELETE_BATCH = 2000


@dataclass
class RetentionReport:
    job_events: int = 0
    shard_records: int = 0
    samples: int = 0
    sweeps_thinned: int = 0


def _delete_ids(model: type[JobEvent] | type[SweepSample], ids: list[int]) -> int:
    deleted = 0
    for i in range(0, len(ids), DELETE_BATCH):
        count, _ = model.objects.filter(pk__in=ids[i : i + DELETE_BATCH]).delete()
        deleted += count
    return deleted


def _delete_in_batches(queryset: QuerySet[JobEvent]) -> int:
    """Delete what ``queryset`` selects, a batch of ids at a time."""
    deleted = 0
    while ids := list(queryset.values_list("pk", flat=True)[:DELETE_BATCH]):
        count, _ = JobEvent.objects.filter(pk__in=ids).delete()
        deleted += count
    return deleted


def thin_samples(*, sweep_id: int, step_s: float) -> int:
    """Keep, per level, the first sample and then each one at least ``step_s`` after the last
    kept; delete the rest. The samples deleted."""
    doomed: list[int] = []
    level, kept_t = None, float("-inf")
    rows = (
        SweepSample.objects.filter(sweep_id=sweep_id)
        .order_by("level_index", "t", "pk")
        .values_list("pk", "level_index", "t")
    )
    for pk, index, t in rows.iterator(chunk_size=DELETE_BATCH):
        if index != level:
            level, kept_t = index, t
        elif t - kept_t >= step_s:
            kept_t = t
        else:
            doomed.append(pk)
    return _delete_ids(SweepSample, doomed)


def retention_run(*, now: datetime | None = None, all_sweeps: bool = False) -> RetentionReport:
    """Apply the retention policy once (module notes); what it deleted."""
    now = now or timezone.now()
    report = RetentionReport()
    events_cutoff = now - timedelta(days=settings.SPECDASH_RETAIN_JOB_EVENTS_DAYS)
    old_jobs = Job.objects.filter(state__in=FINISHED_JOB_STATES, finished_at__lt=events_cutoff)
    report.job_events = _delete_in_batches(JobEvent.objects.filter(job__in=old_jobs))
    shards_cutoff = now - timedelta(seconds=settings.SPECDASH_RETAIN_SHARD_RECORDS_S)
    finished_shards = Job.objects.filter(
        kind=SHARD_JOB_KIND, state__in=FINISHED_JOB_STATES, finished_at__lt=shards_cutoff
    )
    report.shard_records = _delete_in_batches(
        JobEvent.objects.filter(job__in=finished_shards, kind=RECORD)
    )
    samples_cutoff = now - timedelta(days=settings.SPECDASH_RETAIN_SAMPLES_DAYS)
    sweeps = Sweep.objects.filter(state__in=FINISHED_SWEEP_STATES, finished_at__lt=samples_cutoff)
    if not all_sweeps:
        sweeps = sweeps.filter(finished_at__gte=samples_cutoff - SAMPLE_SCAN_WINDOW)
    step = settings.SPECDASH_RETAIN_SAMPLE_STEP_S
    for sweep_id in sweeps.values_list("pk", flat=True).iterator():
        removed = thin_samples(sweep_id=sweep_id, step_s=step)
        report.samples += removed
        report.sweeps_thinned += removed > 0
    return report
