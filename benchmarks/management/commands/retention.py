"""``manage.py retention``: apply the retention policy now (benchmarks/sweeps/retention.py; the job
worker also applies it every SPECDASH_RETENTION_INTERVAL_S)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from benchmarks.sweeps.retention import retention_run


class Command(BaseCommand):
    help = (
        "Delete old job events and shard jobs' per-request rows, and thin old sweeps' samples, "
        "by the policy in docs/operations.md (Records and retention)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--all",
            action="store_true",
            help="thin the samples of every sweep past the age, not only those that passed "
            "it in the last week (after the worker was off, or the step changed)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        report = retention_run(all_sweeps=options["all"])
        self.stdout.write(
            f"deleted {report.job_events} job events of old jobs, {report.shard_records} "
            f"shard per-request rows, {report.samples} samples of {report.sweeps_thinned} sweeps"
        )
