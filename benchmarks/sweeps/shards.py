"""Load-generator shards as jobs, so the shards of one level run on several worker machines.

With ``SPECDASH_LOADGEN_SHARD_JOBS=1`` a split level does not spawn its shards as children
of the coordinating worker: each shard becomes a ``sweep.shard`` job that any worker claims
(on any machine sharing the database), runs the same load-generator argv there, and reports
through its job's append-only events (``JobEvent`` rows): its events as they come, then its
request records, each row written once. The coordinator reads only the rows after the last
one it took in, through ``RemoteShardProcess``, which behaves like a local
``LoadgenProcess``, so the exact merge of ``distributed`` is the same whichever machine each
shard ran on.

Placement: ``SPECDASH_LOADGEN_SHARD_TAGS=a,b`` sends shard i to a worker started with tag i
(``jobworker --tags``); ``SPECDASH_LOADGEN_SHARD_SPREAD=1`` runs a level's shards one per
machine. Gang start: a shard that is claimed says it is ready and waits; once every shard
of the level is claimed and ready, the coordinator gives them one common start, so a shard
claimed late no longer starts late. A level whose shards are not all claimed within
``SPECDASH_LOADGEN_GANG_TIMEOUT_S`` fails, saying which shard could not be placed where.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import tempfile
from collections.abc import AsyncGenerator, Iterator
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from django.conf import settings

from benchlib.loadgen.events import LoadgenEvent
from benchmarks.sweeps.runner import LoadgenProcess
from benchmarks.sweeps.supervisor import Stopping, supervise
from core.jobs import JobContext
from core.jobs import store as jobs_store
from core.models import Job, JobState

SHARD_JOB_KIND = "sweep.shard"
# Between the gang's "all ready" and its common start: every load generator is already up
# and waiting, so this covers only the database round trips that deliver the start.
GANG_MARGIN_S = 1.0
POLL_S = 0.5
# Events are appended at most this often (a sample arrives about once a second); any other
# event at once.
PUBLISH_S = 0.5
# A shard job's events: "event" (a load-generator event line), "record" (a request record line).
EVENT = "event"
RECORD = "record"
RECORDS_PER_APPEND = 500
READ_BATCH = 1000
# The shard job's load generator: terminated on a cancel, given 20 s to report the partial
# level, then stopped (terminate, 5 s, kill) and killed on the way out.
SHARD_STOPPING = Stopping(
    drain_grace=20.0, kill_on_overrun=False, exit_wait=0.0, kill_on_leaving=True
)


# The SPECDASH_LOADGEN_SHARD_* settings (specdash/settings.py), read when a level starts.


def shard_jobs_enabled() -> bool:
    return bool(settings.SPECDASH_LOADGEN_SHARD_JOBS)


def shard_tags() -> list[str]:
    return [str(t).strip() for t in settings.SPECDASH_LOADGEN_SHARD_TAGS if str(t).strip()]


def gang_timeout() -> float:
    return float(settings.SPECDASH_LOADGEN_GANG_TIMEOUT_S)


class PlacementError(Exception):
    """The shards of a level cannot all be placed as asked (reported, never doubled up)."""


def shard_placement(*, n: int, spread_key: str) -> list[dict[str, str]]:
    """Each shard's placement ask (``tag``, ``spread_key``) for a level of ``n`` shards."""
    tags = shard_tags()
    if tags and n > len(tags):
        raise PlacementError(
            f"{n} shards but only {len(tags)} tags ({', '.join(tags)}) in "
            "SPECDASH_LOADGEN_SHARD_TAGS: one shard per tag, so this level cannot be placed"
        )
    spread = spread_key if settings.SPECDASH_LOADGEN_SHARD_SPREAD else ""
    return [{"tag": tags[i] if tags else "", "spread_key": spread} for i in range(n)]


def _warms_up(argv: list[str]) -> bool:
    """Whether the load generator's argv asks for warm-up requests."""
    for flag, value in itertools.pairwise(argv):
        if flag == "--warmup-requests":
            return value.isdigit() and int(value) > 0
    return False


def _with_records(argv: list[str], records: Path) -> list[str]:
    """The same argv with this machine's own records file."""
    out = list(argv)
    if "--records" in out:
        out[out.index("--records") + 1] = str(records)
    else:
        out += ["--records", str(records)]
    return out


class ShardResult(TypedDict):
    """A shard job's result, as stored in ``Job.result``; the last three once its load
    generator has stopped and its records are sent."""

    worker_id: str
    pid: int
    exit_code: NotRequired[int]
    records: NotRequired[int]  # request records appended as the job's rows
    stderr: NotRequired[str]  # the load generator's last 2000 characters of stderr


async def run_shard(ctx: JobContext) -> ShardResult:
    """Run one shard's load generator here and report through the job's events: each event,
    then each request record, appended once as its own row. A gang member starts its load
    generator at once, says it is ready when that process is up, and hands it the common
    start its gang is given (``--start-at-stdin``)."""
    argv = [str(a) for a in ctx.params["argv"]]
    gang = bool(ctx.params.get("gang"))
    if gang:
        argv.append("--start-at-stdin")
    with tempfile.TemporaryDirectory(prefix="specdash-shard-") as tmp:
        records = Path(tmp) / "records.jsonl"
        proc = await LoadgenProcess.start(
            _with_records(argv, records), cwd=settings.BASE_DIR, stdin_pipe=gang
        )
        result: ShardResult = {"worker_id": ctx.worker_id, "pid": proc.pid}
        loop = asyncio.get_running_loop()
        published = 0.0
        pending: list[tuple[str, Any]] = []
        up = asyncio.Event()

        # With warm-up requests a gang member is ready once it has warmed up (it then waits
        # for its start), so that the whole gang's warm-up is over at the common start.
        ready_on = "warmed_up" if _warms_up(argv) else None

        async def take(event: LoadgenEvent) -> None:
            nonlocal published
            if ready_on is None or event["event"] == ready_on:
                up.set()
            pending.append((EVENT, event))
            if loop.time() - published >= PUBLISH_S or event["event"] != "sample":
                published = loop.time()
                await _append(ctx, pending)

        async def gang_start(reader: asyncio.Task[None]) -> None:
            waits = {asyncio.create_task(ctx.cancelled.wait()), asyncio.create_task(up.wait())}
            await asyncio.wait({reader, *waits}, return_when=asyncio.FIRST_COMPLETED)
            for wait in waits:
                wait.cancel()
            start_at = None
            if up.is_set() and not ctx.cancelled.is_set():
                await ctx.mark_ready()
                start_at = await ctx.wait_for_start()
            # No start (a cancel, a level that could not be placed): end of input.
            await proc.send_line(repr(start_at) if start_at is not None else None)

        # The job's cancel is its only watch (the coordinator watches the server); a cancel
        # has the load generator end the level as partial.
        ending = await supervise(
            proc,
            take=take,
            cancelled=ctx.cancelled,
            stopping=SHARD_STOPPING,
            before_watch=gang_start if gang else None,
        )
        result["exit_code"] = ending.exit_code
        await _append(ctx, pending)  # what a reader cut short by the stop had not written
        # Read a batch at a time (off the loop): the job's memory is one batch, not the level.
        batches = _record_batches(records)
        sent = 0
        no_more: list[str] = []
        while batch := await asyncio.to_thread(next, batches, no_more):
            await ctx.append([(RECORD, line) for line in batch])
            sent += len(batch)
        result["records"] = sent
        result["stderr"] = proc.stderr_text()[-2000:]
        return result


def _record_batches(path: Path) -> Iterator[list[str]]:
    """The records file's non-empty lines, RECORDS_PER_APPEND at a time (none when missing)."""
    batch: list[str] = []
    with contextlib.suppress(FileNotFoundError), path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                batch.append(line.rstrip("\r\n"))
                if len(batch) >= RECORDS_PER_APPEND:
                    yield batch
                    batch = []
    if batch:
        yield batch


async def _append(ctx: JobContext, pending: list[tuple[str, Any]]) -> None:
    if pending:
        batch = list(pending)
        pending.clear()
        await ctx.append(batch)


class RemoteShardProcess:
    """A shard running as a job somewhere, seen through its job's events like a local
    process. ``position`` is the seq of the last event it has taken in: a reader attached
    with it (``attach``) goes on from there, each event and record exactly once."""

    def __init__(self, job_id: int, records_path: Path, *, position: int = 0) -> None:
        self.job_id = job_id
        self.records_path = records_path
        self.position = position
        self.exit_code: int | None = None
        self.worker_id = ""
        self._done = asyncio.Event()

    @classmethod
    async def start(
        cls,
        argv: list[str],
        *,
        records_path: Path,
        lock_key: str,
        tag: str = "",
        spread_key: str = "",
        gang: bool = False,
    ) -> RemoteShardProcess:
        job = await jobs_store.ajob_enqueue(
            kind=SHARD_JOB_KIND,
            params={"argv": argv, "gang": gang},
            lock_key=lock_key,
            tag=tag,
            spread_key=spread_key,
        )
        return cls(job.pk, records_path)

    @classmethod
    def attach(cls, job_id: int, records_path: Path, *, position: int = 0) -> RemoteShardProcess:
        """A reader of a shard job already enqueued, from ``position`` on (0: from its first
        event, with a fresh records file)."""
        return cls(job_id, records_path, position=position)

    @property
    def pid(self) -> int:
        return -self.job_id  # not a process here; shown in logs only

    async def events(self) -> AsyncGenerator[LoadgenEvent, None]:
        if self.position == 0:
            await asyncio.to_thread(self.records_path.write_text, "", encoding="utf-8")
        while True:
            # The job's state first: when it has ended, every event it wrote is already
            # there for the read that follows.
            job = await jobs_store.ajob_get(self.job_id)
            while rows := await jobs_store.ajob_events_after(
                job_id=self.job_id, after=self.position, limit=READ_BATCH
            ):
                records: list[str] = []
                for row in rows:
                    if row.kind == RECORD:
                        records.append(str(row.payload))
                        continue
                    await self._take_records(records, upto=row.seq - 1)
                    # Taken in before it is handed on: a reader stopped at this event
                    # never gets it again from a reader attached at its position.
                    self.position = row.seq
                    if row.kind == EVENT:
                        # Rows hold only what the shard's own reader took in through
                        # parse_event (run_shard): checked once, there, not again here.
                        yield cast(LoadgenEvent, dict(row.payload))
                await self._take_records(records, upto=rows[-1].seq)
            if job.is_finished:
                self._finish(job)
                return
            await asyncio.sleep(POLL_S)

    async def _take_records(self, lines: list[str], *, upto: int) -> None:
        """Append the request records read so far to the records file, then move past them."""
        if lines:
            text = "".join(f"{line}\n" for line in lines)
            await asyncio.to_thread(self._append_text, text)
            lines.clear()
        self.position = max(self.position, upto)

    def _append_text(self, text: str) -> None:
        with self.records_path.open("a", encoding="utf-8") as f:
            f.write(text)

    def _finish(self, job: Job) -> None:
        result = job.result or {}
        self.worker_id = str(result.get("worker_id") or job.worker_id)
        self.exit_code = result.get("exit_code")
        self._done.set()

    def terminate(self) -> None:
        asyncio.get_running_loop().create_task(self._cancel())

    def kill(self) -> None:
        self.terminate()

    async def _cancel(self) -> None:
        job = await jobs_store.ajob_get(self.job_id)
        if not job.is_finished:
            await jobs_store.ajob_cancel(job=job)

    async def stop(self, *, grace: float) -> int:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._done.wait(), timeout=grace)
        return self.exit_code if self.exit_code is not None else -1

    async def ended(self, *, wait: float, grace: float) -> int:
        """Its job's exit code, once its events are read to the end: a job cannot be signalled
        past its cancel, so its stop is only a wait (-1: none within ``wait + grace``)."""
        return await self.stop(grace=wait + grace)

    def stderr_text(self) -> str:
        return ""


def _not_ready(job: Job) -> str:
    ask = []
    if job.tag:
        ask.append(f"a worker tagged {job.tag!r}")
    if job.spread_key:
        ask.append("a machine no other shard of the level runs on")
    where = f" (needs {' and '.join(ask)})" if ask else ""
    if job.state == JobState.QUEUED:
        return f"job {job.pk} was never claimed{where}"
    if job.state == JobState.RUNNING:
        return f"job {job.pk} was claimed by {job.worker_id} but never said it was ready"
    return f"job {job.pk} ended {job.state} before the start: {job.error[:200] or 'no reason'}"


async def gang_barrier(
    procs: list[RemoteShardProcess], *, wait_s: float, margin: float = GANG_MARGIN_S
) -> tuple[float, float]:
    """Wait until every shard job is claimed and ready, then give them one common start;
    (the start, seconds waited). PlacementError naming each shard not ready at the timeout
    (or ended early); the shards are then cancelled."""
    import time

    ids = [p.job_id for p in procs]
    loop = asyncio.get_running_loop()
    began = loop.time()
    while True:
        jobs = await jobs_store.agang_members(ids)
        ended = [j for j in jobs if j.is_finished]
        ready = [j for j in jobs if j.state == JobState.RUNNING and j.ready_at is not None]
        if len(ready) == len(ids):
            start_at = time.time() + margin
            if await jobs_store.agang_start(job_ids=ids, start_at=start_at):
                return start_at, loop.time() - began
        elif ended or loop.time() - began > wait_s:
            missing = [j for j in jobs if j not in ready]
            for proc in procs:
                await proc._cancel()
            why = "; ".join(f"shard {ids.index(j.pk)}: {_not_ready(j)}" for j in missing)
            raise PlacementError(
                f"{len(missing)} of {len(ids)} shards not placed within {wait_s:g} s "
                f"(the level was not started, and no shard was doubled up): {why}"
            )
        await asyncio.sleep(POLL_S / 5)
