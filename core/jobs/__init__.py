"""Background jobs: enqueue from services, run in worker processes.

A job's state lives in the ``Job`` table. Web requests only enqueue; worker processes
(``manage.py jobworker``, any number, on any machine sharing the database) claim queued jobs
with a conditional UPDATE that exactly one of them can win, renew a lease while they run
them, and a job whose worker stopped renewing its lease is marked interrupted by any other
worker. Handlers are async functions registered per job kind. Every write a job makes about
itself is fenced (conditional on its row still running under its worker), and a worker that
finds a lease lost stops that job's task at once (``core.jobs.fence``, ``LeaseLost``).
"""

from __future__ import annotations

from core.jobs.registry import (
    JobContext,
    LeaseLost,
    handler_for,
    job_handler,
    on_cancel_forced,
    on_interrupted,
    periodic_task,
)
from core.jobs.services import job_cancel, job_enqueue

__all__ = [
    "JobContext",
    "LeaseLost",
    "handler_for",
    "job_cancel",
    "job_enqueue",
    "job_handler",
    "on_cancel_forced",
    "on_interrupted",
    "periodic_task",
]
