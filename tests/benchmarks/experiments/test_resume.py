"""An interrupted experiment resumes from its first unfinished step and level: its server
re-used when still ready and unchanged, its sweep continued, every interruption in its
history; with auto_resume a worker does it by itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError

from benchmarks import audit
from benchmarks.experiments import services
from benchmarks.experiments.models import Experiment, ExperimentState, ExperimentStep, StepState
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel
from core.jobs.worker import Worker, WorkerSettings
from hosts.models import InstanceState, ServerInstance, ServerProfile
from tests.benchmarks.experiments.test_end_to_end import until

TIMED = {"duration": 1.5, "max_tokens": 8, "input_tokens": 8, "ignore_eos": True}


@asynccontextmanager
async def running_worker(name: str) -> AsyncIterator[Worker]:
    """A job worker in this event loop; leaving the block shuts it down as SIGTERM would."""
    stop = asyncio.Event()
    w = Worker(worker_id=name, settings=WorkerSettings(poll_interval=0.1))
    task = asyncio.create_task(w.run(stop))
    try:
        yield w
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


def _second_level_running(experiment_id: int) -> bool:
    return SweepLevel.objects.filter(
        sweep__experiment_step__experiment_id=experiment_id,
        sweep__experiment_step__index=0,
        index=1,
        state=LevelState.RUNNING,
    ).exists()


def _steps(experiment_id: int) -> list[ExperimentStep]:
    return list(ExperimentStep.objects.filter(experiment_id=experiment_id).order_by("index"))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("auto", [False, True], ids=["resume-button", "auto-resume"])
async def test_an_interrupted_experiment_resumes_on_its_ready_server_from_the_cut_level(
    sim_profile: Callable[..., ServerProfile], auto: bool
) -> None:
    a = await sync_to_async(sim_profile)("fast")
    b = await sync_to_async(sim_profile)("fast")
    experiment = await sync_to_async(services.experiment_create)(
        profiles=[a, b], levels=[1, 2, 3], load=TIMED, auto_resume=auto, repeats=1
    )
    async with running_worker("first"):
        await until(lambda: _second_level_running(experiment.pk), timeout=90)
    experiment = await Experiment.objects.aget(pk=experiment.pk)
    first_step = (await sync_to_async(_steps)(experiment.pk))[0]
    server = await ServerInstance.objects.aget(pk=first_step.instance_id or 0)
    assert server.state == InstanceState.READY  # left to its lifecycle job, adopted next
    if auto:
        assert experiment.state == ExperimentState.QUEUED  # the interrupt hook resumed it
    else:
        assert experiment.state == ExperimentState.INTERRUPTED
        states = [s.state for s in await sync_to_async(_steps)(experiment.pk)]
        assert states == [StepState.INTERRUPTED, StepState.PENDING]
        await sync_to_async(services.experiment_resume)(experiment=experiment)
        with pytest.raises(ValidationError, match="only an interrupted experiment"):
            await sync_to_async(services.experiment_resume)(experiment=experiment)

    async with running_worker("second"):
        await until(lambda: Experiment.objects.get(pk=experiment.pk).is_finished, timeout=120)
    experiment = await Experiment.objects.aget(pk=experiment.pk)
    assert experiment.state == ExperimentState.COMPLETED, experiment.reason
    steps = await sync_to_async(_steps)(experiment.pk)
    assert [s.state for s in steps] == [StepState.DONE, StepState.DONE]
    assert steps[0].instance_id == server.pk  # re-used, not restarted
    events = [h["event"] for h in experiment.history]
    assert events == ["interrupted", "resumed", "server_reused", "sweep_resumed"]
    assert experiment.history[1]["by"] == ("auto-resume" if auto else "the system")
    assert experiment.history[0]["at"] == ["step 1 (sweeping)"]
    sweep = await Sweep.objects.aget(experiment_step=steps[0])
    assert sweep.attempts == 2
    levels = {lv.index: lv async for lv in SweepLevel.objects.filter(sweep=sweep)}
    assert [levels[i].attempt for i in range(3)] == [1, 2, 2]
    assert all(lv.state == LevelState.COMPLETED for lv in levels.values())
    report = await sync_to_async(audit.audit_experiment)(experiment=experiment)
    assert report.problems == [] and report.levels_checked == 6
