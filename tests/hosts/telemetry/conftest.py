from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import pytest
from asgiref.sync import sync_to_async

from core.jobs import JobContext
from core.jobs.registry import JobResult, handler_for, load_handlers
from core.models import Job, JobState
from hosts.telemetry.service import TELEMETRY_JOB, telemetry_lock_key

# The real sshd; the simulated GPUs and the in-process job runner are tests/fixtures/servers.py's.
from tests.fixtures.sshd import sshd  # noqa: F401


@pytest.fixture(autouse=True)
def _kill_leftovers(kill_leftover_servers: None) -> None:
    """Every test here may start servers: none outlives its test."""


async def until(check: Callable[[], Any], *, timeout: float = 60, what: str = "condition") -> Any:
    """Poll a sync check (run off the loop) until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = await sync_to_async(check)()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} not met within {timeout:g} s")
        await asyncio.sleep(0.1)


class TelemetryJob:
    """Runs the queued telemetry job of a host in-process, as a worker would."""

    def __init__(self) -> None:
        load_handlers()
        self.ctx: JobContext | None = None
        self.task: asyncio.Future[JobResult | None] | None = None

    async def start(self, host_id: int) -> None:
        job = await Job.objects.filter(
            kind=TELEMETRY_JOB, lock_key=telemetry_lock_key(host_id), state=JobState.QUEUED
        ).afirst()
        assert job is not None, "no queued telemetry job"
        await Job.objects.filter(pk=job.pk).aupdate(state=JobState.RUNNING, worker_id="test")
        self.ctx = JobContext(job_id=job.pk, kind=job.kind, params=job.params, worker_id="test")
        handler = handler_for(job.kind)
        assert handler is not None
        self.task = asyncio.ensure_future(handler(self.ctx))

    async def stop(self) -> dict[str, Any]:
        assert self.ctx is not None and self.task is not None
        self.ctx.cancelled.set()
        result = await asyncio.wait_for(self.task, 30)
        await Job.objects.filter(pk=self.ctx.job_id).aupdate(state=JobState.SUCCEEDED)
        return cast(dict[str, Any], result or {})
