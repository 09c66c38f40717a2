"""A shard job reports on an append-only path: each event and each request record is one
``JobEvent`` row written once, and the coordinator reads only the rows after the last one it
took in, so a reader that stops and a reader attached at its position see every event once."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from benchmarks.sweeps.shards import EVENT, RECORD, RemoteShardProcess, run_shard
from core.jobs import JobContext, LeaseLost, job_enqueue
from core.jobs.fence import job_append, job_finish
from core.models import Job, JobEvent, JobState

WORKER = "shard-worker"

# A stand-in for the load generator: event lines on stdout, request records into --records.
FAKE_LOADGEN = """
import json, sys
records = sys.argv[sys.argv.index("--records") + 1]
n_samples, n_records = int(sys.argv[1]), int(sys.argv[2])
def emit(**event):
    print(json.dumps(event), flush=True)
emit(event="run_start", run_id="r")
emit(event="level_start", level_index=0, concurrency=2)
for i in range(n_samples):
    emit(event="sample", level_index=0, completed=i)
with open(records, "w") as f:
    for i in range(n_records):
        f.write(json.dumps({"id": f"req-{i}", "start": i}) + "\\n")
emit(event="level_summary", level_index=0, summary={"status": "completed"})
emit(event="run_end", status="completed")
"""


def _running_job(**params: Any) -> Job:
    job = job_enqueue(kind="sweep.shard", params=params)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, worker_id=WORKER)
    return job


def _ctx(job: Job) -> JobContext:
    return JobContext(job_id=job.pk, kind=job.kind, params=job.params, worker_id=WORKER)


@pytest.mark.django_db
def test_each_append_writes_only_its_new_rows_however_many_came_before() -> None:
    job = _running_job()
    writes: list[list[str]] = []
    for i in range(60):
        with CaptureQueriesContext(connection) as queries:
            last = job_append(
                job_id=job.pk, worker_id=WORKER, entries=[(EVENT, {"event": "sample", "i": i})]
            )
        assert last == i + 1
        writes.append(
            [
                re.sub(r"\d+", "N", q["sql"])  # the same statement whatever the numbers
                for q in queries.captured_queries
                if not q["sql"].startswith("SELECT")
            ]
        )
    # The 60th append writes what the first did (one new row and the lease fence), not the
    # 59 events before it: the rows written grow with the events, one each.
    assert writes == [writes[0]] * 60
    assert sum("INSERT" in sql and "jobevent" in sql.lower() for sql in writes[0]) == 1
    assert not any("UPDATE" in sql and "jobevent" in sql.lower() for w in writes for sql in w)
    rows = list(JobEvent.objects.filter(job=job).values_list("seq", "payload"))
    assert rows == [(i + 1, {"event": "sample", "i": i}) for i in range(60)]
    job.refresh_from_db()
    assert job.result == {}  # nothing of the events in the job row


@pytest.mark.django_db
def test_an_append_by_a_worker_that_no_longer_owns_the_job_writes_nothing() -> None:
    job = _running_job()
    assert job_append(job_id=job.pk, worker_id="someone-else", entries=[(EVENT, {})]) is None
    Job.objects.filter(pk=job.pk).update(state=JobState.INTERRUPTED)
    assert job_append(job_id=job.pk, worker_id=WORKER, entries=[(EVENT, {})]) is None
    assert not JobEvent.objects.filter(job=job).exists()


@pytest.mark.django_db(transaction=True)
async def test_a_shard_job_writes_each_event_and_record_once_as_its_own_row(
    tmp_path: Path,
) -> None:
    argv = [sys.executable, "-c", FAKE_LOADGEN, "25", "40"]
    job = await sync_to_async(_running_job)(argv=argv)
    result = await run_shard(_ctx(job))
    assert result["exit_code"] == 0 and result["records"] == 40
    assert "events" not in result  # the job's final result holds no copy of them
    rows = [r async for r in JobEvent.objects.filter(job_id=job.pk).order_by("seq")]
    assert [r.seq for r in rows] == list(range(1, 4 + 25 + 40 + 1))
    events = [r.payload for r in rows if r.kind == EVENT]
    assert [e["event"] for e in events] == (
        ["run_start", "level_start"] + ["sample"] * 25 + ["level_summary", "run_end"]
    )
    assert [e["completed"] for e in events if e["event"] == "sample"] == list(range(25))
    records = [json.loads(r.payload) for r in rows if r.kind == RECORD]
    assert [r["id"] for r in records] == [f"req-{i}" for i in range(40)]
    # Records come after every event, so a reader has the level's end before its records.
    assert all(r.kind == RECORD for r in rows[-40:])

    # Read through the coordinator's view: the same events in order, the records in its file.
    await sync_to_async(job_finish)(
        job_id=job.pk, worker_id=WORKER, state=JobState.SUCCEEDED, result=result
    )
    reader = RemoteShardProcess.attach(job.pk, tmp_path / "shard-0.jsonl")
    seen = [e async for e in reader.events()]
    assert seen == events
    assert await reader.stop(grace=1) == 0 and reader.worker_id == WORKER
    lines = (tmp_path / "shard-0.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [f"req-{i}" for i in range(40)]


@pytest.mark.django_db(transaction=True)
async def test_a_coordinator_restarted_mid_run_sees_every_event_exactly_once(
    tmp_path: Path,
) -> None:
    job = await sync_to_async(_running_job)()
    ctx = _ctx(job)
    await ctx.append([(EVENT, {"event": "sample", "n": n}) for n in range(5)])
    records_path = tmp_path / "shard-0.jsonl"

    first = RemoteShardProcess.attach(job.pk, records_path)
    stream = first.events()
    # The rows here are not whole events ({"n": ...}): the reader is read as a row sequence.
    taken: list[Any] = [await anext(stream) for _ in range(3)]
    await stream.aclose()  # the coordinator dies here, mid-run
    assert first.position == 3

    # The shard goes on meanwhile, then ends.
    await ctx.append([(EVENT, {"event": "sample", "n": n}) for n in range(5, 8)])
    await ctx.append([(RECORD, json.dumps({"id": f"req-{i}"})) for i in range(3)])
    await ctx.append([(EVENT, {"event": "run_end", "n": 8})])
    await sync_to_async(job_finish)(
        job_id=job.pk, worker_id=WORKER, state=JobState.SUCCEEDED,
        result={"worker_id": WORKER, "exit_code": 0},
    )  # fmt: skip

    restarted = RemoteShardProcess.attach(job.pk, records_path, position=first.position)
    rest: list[Any] = [e async for e in restarted.events()]
    assert [e["n"] for e in taken + rest] == list(range(9))  # each once, in order
    assert restarted.position == 12 and await restarted.stop(grace=1) == 0
    assert records_path.read_text().splitlines() == [
        json.dumps({"id": f"req-{i}"}) for i in range(3)
    ]
    # Nothing is lost either: a reader from the start gets it all again.
    fresh: Any = RemoteShardProcess.attach(job.pk, tmp_path / "again.jsonl")
    assert [e["n"] for e in [e async for e in fresh.events()]] == list(range(9))
    assert len((tmp_path / "again.jsonl").read_text().splitlines()) == 3


@pytest.mark.django_db(transaction=True)
async def test_a_shard_that_lost_its_job_stops_appending() -> None:
    job = await sync_to_async(_running_job)()
    ctx = _ctx(job)
    await ctx.append([(EVENT, {"event": "sample"})])
    await Job.objects.filter(pk=job.pk).aupdate(state=JobState.INTERRUPTED)
    with pytest.raises(LeaseLost):
        await ctx.append([(EVENT, {"event": "sample"})])
    assert await JobEvent.objects.filter(job_id=job.pk).acount() == 1
