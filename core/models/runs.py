"""What every piece of queued work records about its life: a job, a sweep, an experiment."""

from __future__ import annotations

from typing import ClassVar

from django.conf import settings
from django.db import models


class Run(models.Model):
    """Who asked for it and when it was created, began and ended; newest first. A subclass
    declares its ``state`` field and the states in which it is over (``finished_states``)."""

    finished_states: ClassVar[frozenset[str]]
    state: str

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        abstract = True
        ordering = ["-created_at"]

    @property
    def is_finished(self) -> bool:
        return self.state in self.finished_states
