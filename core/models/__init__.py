from __future__ import annotations

from core.models.jobs import FINISHED_JOB_STATES, Job, JobEvent, JobHook, JobState
from core.models.tokens import ApiToken
from core.models.workers import WorkerBeat

__all__ = [
    "FINISHED_JOB_STATES",
    "ApiToken",
    "Job",
    "JobEvent",
    "JobHook",
    "JobState",
    "WorkerBeat",
]
