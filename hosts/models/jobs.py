"""Background jobs. Their state lives here, in the database, so that any worker process on
any machine can run them, a restarted dashboard shows the truth, and a dead worker is detected
by its expired lease. See hosts/jobs/ for the worker and docs/operations.md for the design."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    INTERRUPTED = "interrupted", "Interrupted"  # its worker died (lease expired)


FINISHED_JOB_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.INTERRUPTED}
)


class Job(models.Model):
    kind = models.CharField(max_length=64)
    params = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.QUEUED)
    # Jobs that drive the same thing (a server instance, a host port) share a lock key; the
    # partial unique constraint lets only one of them run at a time, across all workers.
    lock_key = models.CharField(max_length=100, blank=True)
    worker_id = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "created_at"], name="job_state_created")]
        constraints = [
            models.UniqueConstraint(
                fields=["lock_key"],
                condition=models.Q(state="running") & ~models.Q(lock_key=""),
                name="job_one_running_per_lock",
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} ({self.state})"

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_JOB_STATES
