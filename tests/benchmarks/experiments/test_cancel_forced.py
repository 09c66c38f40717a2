"""A cancel the experiment runner did not obey within the grace: the experiment ends cancelled,
saying so, and is never resumed by itself (a cancel is the operator's word, not a fault)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from benchmarks.experiments import recording, services
from benchmarks.experiments.models import Experiment, ExperimentState, ExperimentStep, StepState
from core.jobs.registry import forced_cancel_hook_for, load_handlers
from core.models import Job
from hosts.models import ServerProfile

FORCED = "cancelled on request; did not stop within the grace; forced"


@pytest.mark.django_db
@pytest.mark.parametrize("auto_resume", [False, True])
def test_a_forced_cancel_ends_the_experiment_cancelled_not_interrupted(
    sim_profile: Callable[..., ServerProfile], auto_resume: bool
) -> None:
    a, b = sim_profile("fast"), sim_profile("fast")
    experiment = services.experiment_create(
        profiles=[a, b], levels=[1], load={"duration": 1.0}, auto_resume=auto_resume, repeats=1
    )
    Experiment.objects.filter(pk=experiment.pk).update(state=ExperimentState.RUNNING)
    first = ExperimentStep.objects.filter(experiment=experiment).order_by("index").first()
    assert first is not None
    recording.experiment_step_update(step_id=first.pk, state=StepState.SWEEPING)
    job_id = experiment.job_id
    assert job_id is not None
    Job.objects.filter(pk=job_id).update(state="cancelled", error=FORCED)

    load_handlers()  # as a worker does at start
    hook = forced_cancel_hook_for(services.EXPERIMENT_JOB_KIND)
    assert hook is not None
    hook(job_id, {"experiment_id": experiment.pk})

    experiment.refresh_from_db()
    first.refresh_from_db()
    assert experiment.state == ExperimentState.CANCELLED
    assert experiment.reason == FORCED
    assert first.state == StepState.CANCELLED
    assert experiment.history[-1]["event"] == "cancelled"
    assert experiment.history[-1]["at"] == ["step 1 (sweeping)"]
    # not resumed, even when the experiment asked to be resumed after interruptions
    assert not Job.objects.filter(kind=services.EXPERIMENT_JOB_KIND, state="queued").exists()
