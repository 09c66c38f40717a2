"""The sweep job against a real simulator and a real load-generator subprocess."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import psutil
import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from benchlib.loadgen.recordstore import iter_rows
from benchmarks.sweeps import handler, recording, services
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepSample, SweepState
from core.jobs import JobContext
from core.jobs.queue import reap_expired_jobs
from core.jobs.worker import Worker, WorkerSettings
from core.models import Job, JobState
from hosts.models import InstanceState, ServerInstance
from tests.benchmarks.conftest import Simulator, level_summary_event, load


@pytest.fixture(autouse=True)
def _loopback_is_a_registered_host(local_host: Any) -> None:
    """These sweeps target a simulator on this machine by URL: with the local host
    registered, loopback is a registered host's address (benchmarks/sweeps/targets.py)."""


JOB_TIMEOUT = 90


def _context(sweep: Sweep) -> JobContext:
    assert sweep.job_id is not None
    return JobContext(
        job_id=sweep.job_id, kind="sweep.run", params={"sweep_id": sweep.pk}, worker_id="test"
    )


async def _until(check: Callable[[], bool], timeout: float = 45) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await sync_to_async(check)():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.1)


def _level_started(sweep_id: int, index: int) -> Callable[[], bool]:
    return lambda: SweepLevel.objects.filter(sweep_id=sweep_id, index=index).exists()


def _levels(sweep_id: int) -> dict[int, SweepLevel]:
    return {lv.index: lv for lv in SweepLevel.objects.filter(sweep_id=sweep_id)}


@pytest.mark.django_db(transaction=True)
async def test_a_worker_runs_a_sweep_to_completion_and_keeps_levels_samples_and_records(
    simulator: Simulator,
) -> None:
    sweep = await sync_to_async(services.sweep_create)(
        base_url=simulator.base_url, levels=[1, 2],
        load=load(model=simulator.model, requests_per_level=20, max_tokens=4),
    )  # fmt: skip
    stop = asyncio.Event()
    worker = Worker(worker_id="test-worker", settings=WorkerSettings(poll_interval=0.1))
    task = asyncio.create_task(worker.run(stop))
    try:
        await _until(lambda: Job.objects.get(pk=sweep.job_id or 0).is_finished, timeout=JOB_TIMEOUT)
    finally:
        stop.set()
        await task
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    job = await Job.objects.aget(pk=sweep.job_id or 0)
    assert (sweep.state, sweep.reason) == (SweepState.COMPLETED, ""), sweep.reason
    assert job.state == JobState.SUCCEEDED and job.result["levels_finished"] == 2
    assert job.result["loadgen_exit_code"] == 0
    levels = await sync_to_async(_levels)(sweep.pk)
    assert [(lv.concurrency, lv.state, lv.requests_ok) for lv in levels.values()] == [
        (1, LevelState.COMPLETED, 20), (2, LevelState.COMPLETED, 20),
    ]  # fmt: skip
    assert all(lv.output_tok_s and lv.ttft_p50_ms for lv in levels.values())
    # The fast simulator streams its 4 tokens under 2 ms apart: one delivery, so no ITL over
    # deliveries (docs/measurement.md), but the per-event figure is there.
    assert all(lv.summary["itl_event_ms"]["p50"] is not None for lv in levels.values())
    assert levels[1].summary["requests"]["ok"] == 20 and levels[1].started_at is not None
    records = await sync_to_async(lambda: list(iter_rows(Path(sweep.records_path))))()
    assert len(records) == 40 and records[0]["level"] == 0
    assert sweep.finished_at is not None and sweep.current_level_index == 1


@pytest.mark.django_db(transaction=True)
async def test_cancel_mid_level_stops_the_load_generator_and_keeps_a_partial_level(
    slow_simulator: Simulator,
) -> None:
    sweep = await sync_to_async(services.sweep_create)(
        base_url=slow_simulator.base_url, levels=[2, 4],
        load=load(model=slow_simulator.model, requests_per_level=None, duration=60, max_tokens=16),
    )  # fmt: skip
    ctx = _context(sweep)
    job = asyncio.create_task(handler.run_sweep(ctx))
    await _until(lambda: SweepSample.objects.filter(sweep_id=sweep.pk).exists())
    ctx.cancelled.set()
    result = await asyncio.wait_for(job, JOB_TIMEOUT)
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.state == SweepState.CANCELLED and result["state"] == SweepState.CANCELLED
    levels = await sync_to_async(_levels)(sweep.pk)
    assert list(levels) == [0]
    assert levels[0].state == LevelState.PARTIAL
    # The load generator reported the partial level before exiting (its summary is kept).
    assert levels[0].summary["partial"] is True and levels[0].requests_ok > 0
    assert result["loadgen_exit_code"] == 0


@pytest.mark.django_db(transaction=True)
async def test_server_death_mid_level_fails_the_sweep_and_keeps_the_completed_level(
    simulator: Simulator,
) -> None:
    sweep = await sync_to_async(services.sweep_create)(
        base_url=simulator.base_url, levels=[1, 2],
        load=load(model=simulator.model, requests_per_level=None, duration=3.0, max_tokens=4),
    )  # fmt: skip
    ctx = _context(sweep)
    job = asyncio.create_task(handler.run_sweep(ctx))
    await _until(_level_started(sweep.pk, 1))
    simulator.kill()
    result = await asyncio.wait_for(job, JOB_TIMEOUT)
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.state == SweepState.FAILED, sweep.reason
    assert sweep.reason.startswith("load generator stopped the sweep:"), sweep.reason
    levels = await sync_to_async(_levels)(sweep.pk)
    assert levels[0].state == LevelState.COMPLETED and levels[0].requests_ok > 0
    assert levels[1].state in {LevelState.FAILED, LevelState.PARTIAL}
    assert result["state"] == SweepState.FAILED


@pytest.mark.django_db(transaction=True)
async def test_an_instance_leaving_ready_mid_sweep_fails_it_as_a_crash(
    slow_simulator: Simulator,
    make_ready_instance: Callable[..., ServerInstance],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(handler.SETTINGS, "instance_poll_seconds", 0.2)
    instance = await sync_to_async(make_ready_instance)(
        port=slow_simulator.port, served_model_name=slow_simulator.model
    )
    sweep = await sync_to_async(services.sweep_create)(
        instance=instance,
        levels=[2, 4],
        load=load(requests_per_level=None, duration=60, max_tokens=16),
    )
    job = asyncio.create_task(handler.run_sweep(_context(sweep)))
    await _until(lambda: SweepSample.objects.filter(sweep_id=sweep.pk).exists())
    await ServerInstance.objects.filter(pk=instance.pk).aupdate(
        state=InstanceState.CRASHED, reason="process exited with code 1"
    )
    await asyncio.wait_for(job, JOB_TIMEOUT)
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.state == SweepState.FAILED
    assert sweep.reason == "server crashed mid-sweep: crashed: process exited with code 1"
    levels = await sync_to_async(_levels)(sweep.pk)
    assert levels[0].state == LevelState.PARTIAL and 1 not in levels


@pytest.mark.django_db(transaction=True)
async def test_a_load_generator_that_dies_fails_the_sweep_with_its_exit_code_and_stderr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = "import sys; print('Traceback: something broke', file=sys.stderr); sys.exit(7)"
    monkeypatch.setattr(handler, "loadgen_argv", lambda **_: [sys.executable, "-c", script])
    sweep = await sync_to_async(services.sweep_create)(
        base_url="http://127.0.0.1:9", levels=[1], load=load(model="m")
    )
    result = await asyncio.wait_for(handler.run_sweep(_context(sweep)), JOB_TIMEOUT)
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.state == SweepState.FAILED and result["loadgen_exit_code"] == 7
    assert "exited with code 7" in sweep.reason and "something broke" in sweep.reason


@pytest.mark.django_db(transaction=True)
async def test_a_sweep_cancelled_while_queued_is_not_run() -> None:
    sweep = await sync_to_async(services.sweep_create)(
        base_url="http://127.0.0.1:9", levels=[1], load=load()
    )
    await sync_to_async(services.sweep_cancel)(sweep=sweep)
    result = await handler.run_sweep(_context(sweep))
    assert "skipped" in result
    assert (await Sweep.objects.aget(pk=sweep.pk)).state == SweepState.CANCELLED


@pytest.mark.django_db
def test_an_expired_job_lease_marks_the_sweep_interrupted_and_keeps_finished_levels(
    ready_instance: ServerInstance,
) -> None:
    import benchmarks.sweeps.jobs  # noqa: F401  (registers the hook, as the worker does)

    sweep = services.sweep_create(instance=ready_instance, levels=[1, 2], load=load())
    recording.sweep_begin(sweep_id=sweep.pk)
    recording.sweep_level_finished(sweep_id=sweep.pk, summary=level_summary_event(0, 1)["summary"])
    recording.sweep_level_started(sweep_id=sweep.pk, index=1, concurrency=2, t=1.0)
    Job.objects.filter(pk=sweep.job_id or 0).update(
        state=JobState.RUNNING,
        worker_id="gone",
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )
    assert reap_expired_jobs() == [sweep.job_id]
    sweep.refresh_from_db()
    assert sweep.state == SweepState.INTERRUPTED
    assert sweep.reason == "interrupted: worker gone stopped renewing its lease"
    states = dict(SweepLevel.objects.filter(sweep=sweep).values_list("index", "state"))
    assert states == {0: LevelState.COMPLETED, 1: LevelState.PARTIAL}


@pytest.mark.django_db(transaction=True)
async def test_worker_shutdown_mid_sweep_stops_the_load_generator_and_interrupts_the_sweep(
    slow_simulator: Simulator,
) -> None:
    sweep = await sync_to_async(services.sweep_create)(
        base_url=slow_simulator.base_url, levels=[2],
        load=load(model=slow_simulator.model, requests_per_level=None, duration=60, max_tokens=16),
    )  # fmt: skip
    stop = asyncio.Event()
    worker = Worker(worker_id="w-shutdown", settings=WorkerSettings(poll_interval=0.1))
    task = asyncio.create_task(worker.run(stop))
    await _until(lambda: SweepSample.objects.filter(sweep_id=sweep.pk).exists())
    loadgens = [
        p for p in psutil.Process().children(recursive=True) if "benchlib.loadgen" in p.cmdline()
    ]
    assert len(loadgens) == 1
    stop.set()
    await asyncio.wait_for(task, JOB_TIMEOUT)
    _gone, alive = await asyncio.to_thread(psutil.wait_procs, loadgens, 20)
    assert not alive
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.state == SweepState.INTERRUPTED and sweep.reason == "interrupted: worker shut down"
    levels = await sync_to_async(_levels)(sweep.pk)
    assert levels[0].state == LevelState.PARTIAL


@pytest.mark.django_db(transaction=True)
async def test_a_sweep_cancel_past_the_grace_is_forced_and_the_sweep_ends_cancelled_saying_so(
    slow_simulator: Simulator,
) -> None:
    from core.jobs import job_cancel
    from core.jobs.execution import FORCED_REASON

    sweep = await sync_to_async(services.sweep_create)(
        base_url=slow_simulator.base_url, levels=[2],
        load=load(model=slow_simulator.model, requests_per_level=None, duration=60, max_tokens=16),
    )  # fmt: skip
    stop = asyncio.Event()
    # No grace at all: the cancel is forced at the poll that sees it.
    worker = Worker(
        worker_id="w-forced", settings=WorkerSettings(poll_interval=0.1, cancel_grace=0)
    )
    task = asyncio.create_task(worker.run(stop))
    try:
        await _until(lambda: SweepSample.objects.filter(sweep_id=sweep.pk).exists())
        loadgens = [
            p
            for p in psutil.Process().children(recursive=True)
            if "benchlib.loadgen" in p.cmdline()
        ]
        assert len(loadgens) == 1
        job = await Job.objects.aget(pk=sweep.job_id or 0)
        await sync_to_async(job_cancel)(job=job)
        await _until(lambda: Sweep.objects.get(pk=sweep.pk).is_finished)
    finally:
        stop.set()
        await asyncio.wait_for(task, JOB_TIMEOUT)
    _gone, alive = await asyncio.to_thread(psutil.wait_procs, loadgens, 20)
    assert not alive
    job = await Job.objects.aget(pk=sweep.job_id or 0)
    assert (job.state, job.error) == (JobState.CANCELLED, FORCED_REASON)
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert (sweep.state, sweep.reason) == (SweepState.CANCELLED, FORCED_REASON)
    levels = await sync_to_async(_levels)(sweep.pk)
    assert levels[0].state == LevelState.PARTIAL


async def _run_to_end(sweep: Sweep) -> Sweep:
    stop = asyncio.Event()
    worker = Worker(worker_id="test-worker", settings=WorkerSettings(poll_interval=0.1))
    task = asyncio.create_task(worker.run(stop))
    try:
        await _until(lambda: Job.objects.get(pk=sweep.job_id or 0).is_finished, timeout=JOB_TIMEOUT)
    finally:
        stop.set()
        await task
    return await Sweep.objects.aget(pk=sweep.pk)


@pytest.mark.django_db(transaction=True)
async def test_a_sweep_without_a_model_name_sends_the_one_the_server_lists(
    simulator: Simulator,
) -> None:
    # The simulator answers 404 to any other model name, as vLLM does.
    sweep = await sync_to_async(services.sweep_create)(
        base_url=simulator.base_url, levels=[1], load=load(requests_per_level=5, max_tokens=4)
    )
    assert sweep.environment["target"]["model"] == ""
    sweep = await _run_to_end(sweep)
    assert (sweep.state, sweep.reason) == (SweepState.COMPLETED, ""), sweep.reason
    (level,) = (await sync_to_async(_levels)(sweep.pk)).values()
    assert level.summary["requests"]["ok"] == 5 and level.summary["requests"]["failed"] == 0


@pytest.mark.django_db(transaction=True)
async def test_a_sweep_whose_server_lists_no_model_fails_before_any_level(tmp_path: Path) -> None:
    from tests.benchlib.loadgen.test_stale_connection import ClosingServer

    fake = ClosingServer(serve=0)  # accepts connections, never answers
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        sweep = await sync_to_async(services.sweep_create)(
            base_url=f"http://127.0.0.1:{port}", levels=[1, 2], load=load(requests_per_level=5)
        )
        sweep = await _run_to_end(sweep)
    assert sweep.state == SweepState.FAILED
    assert sweep.reason.startswith(f"no model name to send: GET http://127.0.0.1:{port}/v1/models")
    assert "served model name" in sweep.reason
    assert await sync_to_async(_levels)(sweep.pk) == {}


@pytest.mark.django_db(transaction=True)
async def test_a_full_records_disk_gives_a_clear_reason_and_no_torn_last_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: Any
) -> None:
    # What the load generator does when the disk fills mid-record: a whole record, then part
    # of the next, then it dies on ENOSPC with a traceback on stderr.
    settings.SPECDASH_DATA_DIR = tmp_path / "data"
    script = (
        "import sys, errno, os\n"
        "path = sys.argv[1]\n"
        "with open(path, 'a') as f:\n"
        '    f.write(\'{"level": 0, "id": "a"}\\n{"level": 0, "id": "b", "ttf\')\n'
        "raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))\n"
    )
    monkeypatch.setattr(
        handler,
        "loadgen_argv",
        lambda **kw: [sys.executable, "-c", script, str(kw["records_path"])],
    )
    sweep = await sync_to_async(services.sweep_create)(
        base_url="http://127.0.0.1:9", levels=[1], load=load(model="m")
    )
    await asyncio.wait_for(handler.run_sweep(_context(sweep)), JOB_TIMEOUT)
    sweep = await Sweep.objects.aget(pk=sweep.pk)
    assert sweep.state == SweepState.FAILED
    assert sweep.reason.startswith("the disk holding the records is full"), sweep.reason
    assert "Traceback" not in sweep.reason and "resume" in sweep.reason
    records = recording.sweep_records_file(sweep_id=sweep.pk).read_text()
    assert records == '{"level": 0, "id": "a"}\n'


def test_trimming_keeps_whole_lines_only(tmp_path: Path) -> None:
    from benchmarks.sweeps.recordfile import trim_torn_tail

    path = tmp_path / "r.jsonl"
    assert trim_torn_tail(path) == 0  # missing
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n')
    assert trim_torn_tail(path) == 0 and path.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    path.write_bytes(b'{"a": 1}\n' + b"x" * 200_000)
    assert trim_torn_tail(path) == 200_000 and path.read_bytes() == b'{"a": 1}\n'
    path.write_bytes(b"torn")
    assert trim_torn_tail(path) == 4 and path.read_bytes() == b""
