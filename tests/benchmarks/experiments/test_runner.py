"""The experiment job's control flow through the real lifecycle and sweep jobs: a cancel, a
start failure (continue or stop), a dirty stop that halts, output checks that differ, and
an interrupted worker."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from benchmarks.experiments import recording, services
from benchmarks.experiments.models import Experiment, ExperimentState, ExperimentStep, StepState
from benchmarks.sweeps.models import Sweep, SweepSample
from core.jobs.queue import reap_expired_jobs
from core.jobs.worker import Worker
from core.models import Job, JobState
from hosts.models import InstanceState, ServerInstance, ServerProfile
from tests.benchmarks.experiments.conftest import ROOT
from tests.benchmarks.experiments.test_end_to_end import until

SHORT = {"requests_per_level": 4, "max_tokens": 4, "input_tokens": 8, "ignore_eos": True}
HOLDER = (
    "import sys, time\n"
    "from benchlib.simulator.gpu import Holding\n"
    "Holding(sys.argv[1], {0: 4096}, 'foreign')\n"
    "print('held', flush=True)\n"
    "time.sleep(300)\n"
)


def _steps(experiment_id: int) -> list[ExperimentStep]:
    return list(ExperimentStep.objects.filter(experiment_id=experiment_id).order_by("index"))


async def _finished(experiment_id: int, timeout: float = 90) -> Experiment:
    await until(lambda: Experiment.objects.get(pk=experiment_id).is_finished, timeout=timeout)
    return await Experiment.objects.aget(pk=experiment_id)


@pytest.fixture
def foreign_holder(sim_state: Path) -> Iterator[Callable[[], None]]:
    """Starts, on demand, a process outside specdash that holds 4 GB of simulated GPU 0."""
    procs: list[subprocess.Popen[str]] = []

    def start() -> None:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(sim_state)], cwd=ROOT, stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.django_db(transaction=True)
async def test_cancel_mid_sweep_cancels_the_sweep_stops_the_server_and_skips_the_rest(
    sim_profile: Callable[..., ServerProfile], worker: Worker
) -> None:
    a = await sync_to_async(sim_profile)("fast")
    b = await sync_to_async(sim_profile)("fast")
    experiment = await sync_to_async(services.experiment_create)(
        profiles=[a, b], levels=[2], load={**SHORT, "requests_per_level": None, "duration": 60}, repeats=1,
    )  # fmt: skip
    await until(
        lambda: SweepSample.objects.filter(
            sweep__experiment_step__experiment_id=experiment.pk
        ).exists(),
        timeout=60,
    )
    await sync_to_async(services.experiment_cancel)(experiment=experiment)
    experiment = await _finished(experiment.pk)
    assert experiment.state == ExperimentState.CANCELLED
    assert experiment.reason == "cancelled by the system"
    first, second = await sync_to_async(_steps)(experiment.pk)
    assert (first.state, first.reason) == (StepState.CANCELLED, "cancelled while sweeping")
    assert second.state == StepState.CANCELLED and second.instance_id is None
    sweep = await Sweep.objects.aget(experiment_step=first)
    assert sweep.state == "cancelled"
    # The server is in a known state: stopped, verified, claims released.
    instance = await ServerInstance.objects.aget(pk=first.instance_id or 0)
    assert instance.state == InstanceState.STOPPED
    assert not await ServerInstance.objects.filter(profile=b).aexists()
    job = await Job.objects.aget(pk=experiment.job_id or 0)
    assert job.state == JobState.CANCELLED


@pytest.mark.django_db(transaction=True)
async def test_a_start_failure_stops_the_experiment_when_asked_to(
    sim_profile: Callable[..., ServerProfile], worker: Worker
) -> None:
    broken = await sync_to_async(sim_profile)("fast", "--fail-oom-at-start")
    good = await sync_to_async(sim_profile)("fast")
    experiment = await sync_to_async(services.experiment_create)(
        profiles=[broken, good], levels=[1], load=SHORT, continue_on_start_failure=False, repeats=1
    )
    experiment = await _finished(experiment.pk)
    assert experiment.state == ExperimentState.FAILED
    assert "stops on a start failure" in experiment.reason
    first, second = await sync_to_async(_steps)(experiment.pk)
    assert first.state == StepState.FAILED
    assert "did not become ready (failed)" in first.reason and "exited with code 1" in first.reason
    assert second.state == StepState.SKIPPED
    assert not await ServerInstance.objects.filter(profile=good).aexists()


@pytest.mark.django_db(transaction=True)
async def test_a_start_failure_is_recorded_and_the_others_still_run(
    sim_profile: Callable[..., ServerProfile], worker: Worker
) -> None:
    broken = await sync_to_async(sim_profile)("fast", "--fail-oom-at-start")
    good = await sync_to_async(sim_profile)("fast")
    experiment = await sync_to_async(services.experiment_create)(
        profiles=[broken, good], levels=[1], load=SHORT, repeats=1
    )
    experiment = await _finished(experiment.pk)
    assert experiment.state == ExperimentState.COMPLETED
    assert experiment.reason == "1 of 2 steps failed"
    first, second = await sync_to_async(_steps)(experiment.pk)
    assert (first.state, second.state) == (StepState.FAILED, StepState.DONE)
    warnings = experiment.comparison["warnings"]
    assert any("has no completed level" in w for w in warnings)
    instance = await ServerInstance.objects.aget(pk=second.instance_id or 0)
    assert instance.state == InstanceState.STOPPED


@pytest.mark.django_db(transaction=True)
async def test_a_dirty_stop_halts_the_experiment_before_anything_starts_on_that_gpu(
    sim_profile: Callable[..., ServerProfile], worker: Worker,
    foreign_holder: Callable[[], None],
) -> None:  # fmt: skip
    a = await sync_to_async(sim_profile)("fast")
    b = await sync_to_async(sim_profile)("fast")
    experiment = await sync_to_async(services.experiment_create)(
        profiles=[a, b], levels=[1], load={**SHORT, "requests_per_level": None, "duration": 2}, repeats=1,
    )  # fmt: skip
    await until(
        lambda: ServerInstance.objects.filter(profile=a, state=InstanceState.READY).exists(),
        timeout=60,
    )
    # Something outside specdash takes GPU 0 memory while A runs: A's stop cannot verify it.
    await asyncio.to_thread(foreign_holder)
    experiment = await _finished(experiment.pk)
    assert experiment.state == ExperimentState.HALTED
    first, second = await sync_to_async(_steps)(experiment.pk)
    assert first.state == StepState.DONE
    assert second.state == StepState.FAILED and "is not clean (dirty): not started" in second.reason
    assert second.instance_id is None
    assert not await ServerInstance.objects.filter(profile=b).aexists()
    assert experiment.evidence["state"] == InstanceState.DIRTY
    assert experiment.evidence["instance_id"] == first.instance_id
    assert "before step 2" in experiment.reason and "GPU" in str(experiment.evidence)
    instance = await ServerInstance.objects.aget(pk=first.instance_id or 0)
    assert instance.state == InstanceState.DIRTY


@pytest.mark.django_db(transaction=True)
async def test_profiles_whose_greedy_outputs_differ_are_flagged(
    sim_profile: Callable[..., ServerProfile], worker: Worker
) -> None:
    # The simulator's text is a fixed cycle of word pieces, so only its length can differ:
    # with a per-token pseudo-EOS, the length is a draw seeded by --seed.
    a = await sync_to_async(sim_profile)("fast", "--eos-prob", "0.3", "--seed", "1")
    b = await sync_to_async(sim_profile)("fast", "--eos-prob", "0.3", "--seed", "2")
    experiment = await sync_to_async(services.experiment_create)(
        profiles=[a, b], levels=[1], load=SHORT, check_output_equivalence=True, repeats=1
    )
    experiment = await _finished(experiment.pk)
    assert experiment.state == ExperimentState.COMPLETED, experiment.reason
    eq = experiment.comparison["equivalence"]
    assert eq["flagged"] == ["B"]
    b_result = next(p for p in eq["profiles"] if p["label"] == "B")
    assert not b_result["equivalent"] and b_result["difference_count"] >= 1
    first = b_result["differences"][0]
    assert first["reference"] != first["candidate"]


@pytest.mark.django_db
def test_an_interrupted_job_marks_the_experiment_and_its_running_step(
    make_profile: Callable[..., ServerProfile],
) -> None:
    import benchmarks.experiments.jobs  # noqa: F401  (registers the hook, as the worker does)

    experiment = services.experiment_create(
        profiles=[make_profile(), make_profile()],
        levels=[1],
        load={"requests_per_level": 5},
        repeats=1,
    )
    plan = recording.experiment_begin(experiment_id=experiment.pk)
    assert plan is not None
    recording.experiment_step_update(step_id=plan.steps[0].step_id, state=StepState.SWEEPING)
    Job.objects.filter(pk=experiment.job_id or 0).update(
        state=JobState.RUNNING, worker_id="gone",
        lease_expires_at=timezone.now() - timedelta(seconds=1),
    )  # fmt: skip
    assert reap_expired_jobs() == [experiment.job_id]
    experiment.refresh_from_db()
    assert experiment.state == ExperimentState.INTERRUPTED
    assert experiment.reason == "interrupted: worker gone stopped renewing its lease"
    states = [s.state for s in _steps(experiment.pk)]
    # The step never started stays pending: a resume runs it.
    assert states == [StepState.INTERRUPTED, StepState.PENDING]


@pytest.mark.timeout(400)  # four server starts and verified stops on 2 busy cores
@pytest.mark.django_db(transaction=True)
async def test_the_default_protocol_runs_a_b_b_a_and_records_each_runs_environment(
    sim_profile: Callable[..., ServerProfile], worker: Worker, tmp_path: Path
) -> None:
    draft = tmp_path / "draft.gguf"
    draft.write_bytes(b"GGUF" + bytes(100))
    # The simulator serves whatever model name it is given: here a file, as an engine's would.
    a = await sync_to_async(sim_profile)("fast", "--model", str(draft))
    b = await sync_to_async(sim_profile)("fast", "--model", str(draft))
    await ServerProfile.objects.filter(pk__in=[a.pk, b.pk]).aupdate(served_model_name=str(draft))
    experiment = await sync_to_async(services.experiment_create)(
        profiles=[a, b], levels=[1, 2], load=SHORT
    )
    experiment = await _finished(experiment.pk, timeout=360)
    assert experiment.state == ExperimentState.COMPLETED, experiment.reason
    steps = await sync_to_async(_steps)(experiment.pk)
    arm_a = await _arm(experiment, "A")
    assert [(s.arm_id == arm_a, s.repeat) for s in steps] == [
        (True, 0), (False, 0), (False, 1), (True, 1),
    ]  # fmt: skip
    sweeps = [s async for s in Sweep.objects.filter(experiment_step__experiment=experiment)]
    assert len(sweeps) == 4
    for sweep in sweeps:
        (record,) = sweep.environment["records"]
        assert record["engine_version"] and record["argv"][-1] == str(draft)
        (gpu,) = record["gpus"]
        assert gpu["index"] == 0 and gpu["power_limit_w"] and gpu["clocks_max_sm_mhz"]
        assert len(record["load_avg"]) == 3 and record["specdash_version"]
        (model,) = record["model_files"]
        assert model["path"] == str(draft) and model["size"] == 104 and model["sha256"]
    protocol = experiment.comparison["protocol"]
    assert protocol["run_order"] == ["A", "B", "B", "A"]
    assert [d["concurrency"] for d in protocol["drift"]["B"]] == [1, 2]
    assert all(d["order_effect"] is not None for d in protocol["drift"]["B"])
    assert experiment.comparison["environment_differences"] == {}


async def _arm(experiment: Experiment, label: str) -> int:
    arm = await experiment.arms.aget(label=label)
    return int(arm.pk)
