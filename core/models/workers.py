"""What each job worker last said about itself: one row per worker process, written at every
heartbeat. The dashboard (any web process) reads these rows to know whether a healthy worker is
alive, which is what it needs before it accepts new work; see ``core.jobs.health``."""

from __future__ import annotations

from django.db import models


class WorkerBeat(models.Model):
    worker_id = models.CharField(max_length=100, unique=True)
    machine = models.CharField(max_length=100, blank=True)
    pid = models.PositiveIntegerField(default=0)
    # The job kinds it claims (empty: every kind), so a refusal can be per kind.
    kinds = models.JSONField(default=list, blank=True)
    # False while its loop fails (the database refuses its writes, or cannot be reached); the
    # row may then be stale as well, since writing it is what fails.
    healthy = models.BooleanField(default=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField()
    beat_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["worker_id"]

    def __str__(self) -> str:
        return f"{self.worker_id} ({'healthy' if self.healthy else 'unhealthy'})"
