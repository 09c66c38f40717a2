"""Load-generator shards as jobs, so the shards of one level run on several worker machines.

With ``SPECDASH_LOADGEN_SHARD_JOBS=1`` a split level does not spawn its shards as children
of the coordinating worker: each shard becomes a ``sweep.shard`` job that any worker claims
(on any machine sharing the database), runs the same load-generator argv there, and reports
through its job row: events as they come, then its request records. The coordinator reads
them through ``RemoteShardProcess``, which behaves like a local ``LoadgenProcess``, so the
exact merge of ``distributed`` is the same whichever machine each shard ran on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.utils import timezone

from benchmarks.sweeps.runner import LoadgenProcess
from hosts.jobs import JobContext, job_cancel, job_enqueue
from hosts.models import Job

SHARD_JOBS_ENV = "SPECDASH_LOADGEN_SHARD_JOBS"
SHARD_JOB_KIND = "sweep.shard"
POLL_S = 0.5
# Events are published to the job row at most this often (a sample arrives about once a second).
PUBLISH_S = 0.5


def shard_jobs_enabled() -> bool:
    return os.environ.get(SHARD_JOBS_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def _with_records(argv: list[str], records: Path) -> list[str]:
    """The same argv with this machine's own records file."""
    out = list(argv)
    if "--records" in out:
        out[out.index("--records") + 1] = str(records)
    else:
        out += ["--records", str(records)]
    return out


def _publish(job_id: int, result: dict[str, Any]) -> None:
    Job.objects.filter(pk=job_id).update(result=result, heartbeat_at=timezone.now())


async def run_shard(ctx: JobContext) -> dict[str, Any]:
    """Run one shard's load generator here and report through the job row."""
    argv = [str(a) for a in ctx.params["argv"]]
    with tempfile.TemporaryDirectory(prefix="specdash-shard-") as tmp:
        records = Path(tmp) / "records.jsonl"
        proc = await LoadgenProcess.start(_with_records(argv, records), cwd=settings.BASE_DIR)
        result: dict[str, Any] = {"worker_id": ctx.worker_id, "events": [], "pid": proc.pid}
        loop = asyncio.get_running_loop()
        published = 0.0

        async def read() -> None:
            nonlocal published
            async for event in proc.events():
                result["events"].append(event)
                if loop.time() - published >= PUBLISH_S or event.get("event") != "sample":
                    published = loop.time()
                    await sync_to_async(_publish)(ctx.job_id, dict(result))

        reader = asyncio.create_task(read())
        cancel = asyncio.create_task(ctx.cancelled.wait())
        try:
            await asyncio.wait({reader, cancel}, return_when=asyncio.FIRST_COMPLETED)
            if not reader.done():
                proc.terminate()  # a cancel: the load generator ends the level as partial
                await asyncio.wait({reader}, timeout=20)
            result["exit_code"] = await proc.stop(grace=5)
        finally:
            cancel.cancel()
            proc.kill()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        text = await asyncio.to_thread(
            lambda: records.read_text(encoding="utf-8") if records.exists() else ""
        )
        result["records"] = [line for line in text.splitlines() if line.strip()]
        result["stderr"] = proc.stderr_text()[-2000:]
        return result


class RemoteShardProcess:
    """A shard running as a job somewhere, seen through its job row like a local process."""

    def __init__(self, job: Job, records_path: Path) -> None:
        self.job_id = job.pk
        self.records_path = records_path
        self.exit_code: int | None = None
        self.worker_id = ""
        self._done = asyncio.Event()

    @classmethod
    async def start(
        cls, argv: list[str], *, records_path: Path, lock_key: str
    ) -> RemoteShardProcess:
        job = await sync_to_async(job_enqueue)(
            kind=SHARD_JOB_KIND, params={"argv": argv}, lock_key=lock_key
        )
        return cls(job, records_path)

    @property
    def pid(self) -> int:
        return -self.job_id  # not a process here; shown in logs only

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        seen = 0
        while True:
            job = await Job.objects.aget(pk=self.job_id)
            events = (job.result or {}).get("events") or []
            for event in events[seen:]:
                yield event
            seen = len(events)
            if job.is_finished:
                await self._finish(job)
                return
            await asyncio.sleep(POLL_S)

    async def _finish(self, job: Job) -> None:
        result = job.result or {}
        self.worker_id = str(result.get("worker_id") or job.worker_id)
        self.exit_code = result.get("exit_code")
        lines = result.get("records") or []
        await asyncio.to_thread(
            self.records_path.write_text, "".join(f"{line}\n" for line in lines), encoding="utf-8"
        )
        self._done.set()

    def terminate(self) -> None:
        asyncio.get_running_loop().create_task(self._cancel())

    def kill(self) -> None:
        self.terminate()

    async def _cancel(self) -> None:
        job = await Job.objects.aget(pk=self.job_id)
        if not job.is_finished:
            await sync_to_async(job_cancel)(job=job)

    async def stop(self, *, grace: float) -> int:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._done.wait(), timeout=grace)
        return self.exit_code if self.exit_code is not None else -1

    def stderr_text(self) -> str:
        return ""
