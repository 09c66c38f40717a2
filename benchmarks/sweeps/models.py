"""Concurrency sweeps: a target server, a list of levels, load settings, and what was measured."""

from __future__ import annotations

from django.db import models

from core.models import Job
from core.models.runs import Run
from hosts.models import ServerInstance, ServerProfile

DEFAULT_LEVELS = [1, 2, 5, 10, 30, 70, 100, 250]


class SweepState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"  # e.g. the server died mid-sweep; completed levels are kept
    INTERRUPTED = "interrupted", "Interrupted"  # the worker running it died


FINISHED_SWEEP_STATES = frozenset(
    {SweepState.COMPLETED, SweepState.CANCELLED, SweepState.FAILED, SweepState.INTERRUPTED}
)


class PlannedRun(Run):
    """What a sweep and an experiment both keep beside ``Run``'s: the levels planned, why it
    ended as it did, notes and tags, the last audit and the job that runs it."""

    levels = models.JSONField(default=list)
    reason = models.TextField(blank=True)
    notes = models.TextField(blank=True)
    tags = models.JSONField(default=list, blank=True)
    # The last audit's outcome (a sweep's: benchmarks.audit_report.AuditReport.as_dict() and
    # when it ran; an experiment's: its sweeps' and its stored comparison's), stored when the
    # run ends and by ``manage.py specdash audit``: pages show it, never rerun it.
    audit = models.JSONField(default=dict, blank=True)
    job = models.ForeignKey(Job, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")

    class Meta(Run.Meta):
        abstract = True


class Sweep(PlannedRun):
    finished_states = FINISHED_SWEEP_STATES

    name = models.CharField(max_length=200, blank=True)
    instance = models.ForeignKey(
        ServerInstance, on_delete=models.PROTECT, null=True, blank=True, related_name="sweeps"
    )
    profile = models.ForeignKey(
        ServerProfile, on_delete=models.PROTECT, null=True, blank=True, related_name="sweeps"
    )
    # Direct URL for a server specdash did not start (scripted runs against any endpoint).
    base_url = models.CharField(max_length=300, blank=True)
    experiment_step = models.OneToOneField(
        "benchmarks.ExperimentStep",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="sweep",
    )
    load = models.JSONField(default=dict, blank=True, help_text="Load generator settings")
    state = models.CharField(max_length=12, choices=SweepState.choices, default=SweepState.QUEUED)
    current_level_index = models.IntegerField(null=True, blank=True)
    environment = models.JSONField(
        default=dict,
        blank=True,
        help_text="What makes the run comparable: argv, env, GPUs, versions",
    )
    records_path = models.CharField(max_length=500, blank=True)
    # How many times a job began running this sweep (1 for a sweep never resumed): every
    # record and level carries the attempt that measured it.
    attempts = models.PositiveIntegerField(default=0)

    class Meta(PlannedRun.Meta):
        permissions = [("run_sweep", "Can launch and cancel sweeps and experiments")]

    def __str__(self) -> str:
        return self.name or f"Sweep #{self.pk}"


class LevelState(models.TextChoices):
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    PARTIAL = "partial", "Partial"  # cut short by a cancel, a crash or an interruption
    FAILED = "failed", "Failed"


class SweepLevel(models.Model):
    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="level_results")
    index = models.PositiveIntegerField()
    concurrency = models.PositiveIntegerField()
    state = models.CharField(max_length=10, choices=LevelState.choices, default=LevelState.RUNNING)
    summary = models.JSONField(default=dict, blank=True)
    server_metrics = models.JSONField(default=dict, blank=True)
    # Denormalised headline figures, for ordering, filtering and cheap history queries.
    output_tok_s = models.FloatField(null=True, blank=True)
    steady_output_tok_s = models.FloatField(null=True, blank=True)
    ttft_p50_ms = models.FloatField(null=True, blank=True)
    ttft_p99_ms = models.FloatField(null=True, blank=True)
    tpot_p50_ms = models.FloatField(null=True, blank=True)
    itl_p50_ms = models.FloatField(null=True, blank=True, help_text="Token-level")
    itl_p99_ms = models.FloatField(null=True, blank=True, help_text="Token-level")
    e2e_p50_ms = models.FloatField(null=True, blank=True)
    achieved_concurrency = models.FloatField(null=True, blank=True)
    requests_ok = models.PositiveIntegerField(default=0)
    requests_failed = models.PositiveIntegerField(default=0)
    reason = models.TextField(blank=True, help_text="Why the level was cut short")
    # The sweep attempt whose records this row summarises (records carry the same number).
    attempt = models.PositiveIntegerField(default=1)
    # What earlier attempts of this level measured before it was run again (never dropped).
    earlier_attempts = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["sweep", "index"]
        constraints = [
            models.UniqueConstraint(fields=["sweep", "index"], name="sweep_level_unique_index")
        ]

    def __str__(self) -> str:
        return f"{self.sweep} C={self.concurrency}"


class SweepSample(models.Model):
    """One live sample (about a second) of a sweep: kept so late viewers see the history."""

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="samples")
    level_index = models.PositiveIntegerField()
    t = models.FloatField(help_text="Wall-clock time (epoch seconds)")
    data = models.JSONField(default=dict)

    class Meta:
        ordering = ["sweep", "t"]
        indexes = [models.Index(fields=["sweep", "t"], name="sweep_sample_time")]

    def __str__(self) -> str:
        return f"{self.sweep} sample @{self.t:.1f}"
