"""Re-runs with the same settings (sweeps and experiments, page and API), Retry of a failed
experiment, the port holder it offers to stop, and the ready server an experiment re-uses."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.exceptions import ValidationError
from django.test import Client

from benchlib.json_types import JsonObject
from benchmarks.experiments import services as experiment_services
from benchmarks.experiments.models import Experiment, ExperimentState
from benchmarks.experiments.recording import ExperimentPlan
from benchmarks.experiments.runner import ExperimentRun
from benchmarks.sweeps import services
from benchmarks.sweeps.models import Sweep, SweepState
from core.jobs import JobContext
from core.models import Job, JobState
from hosts import presets
from hosts import services as host_services
from hosts.models import InstanceState, ServerInstance, ServerProfile
from tests.benchmarks.test_endpoint_profiles import endpoint_profile

pytestmark = pytest.mark.django_db

LOAD: JsonObject = {"requests_per_level": 4, "max_tokens": 8, "input_tokens": 16}


def _finished(sweep: Sweep, state: str = SweepState.COMPLETED) -> Sweep:
    Sweep.objects.filter(pk=sweep.pk).update(state=state)
    sweep.refresh_from_db()
    return sweep


def test_a_sweep_is_re_run_with_its_settings_on_its_server_while_ready(
    ready_instance: ServerInstance,
) -> None:
    created = services.sweep_create(
        instance=ready_instance, levels=[1, 4], load=LOAD, name="nightly", notes="n",
        tags=["ci", "experiment:9", "arm:A"],
    )  # fmt: skip
    first = _finished(created)
    again = services.sweep_rerun(sweep=first)
    assert again.pk != first.pk and again.state == SweepState.QUEUED
    assert again.instance == ready_instance
    assert (again.levels, again.load, again.name, again.notes) == (
        first.levels, first.load, "nightly", "n"
    )  # fmt: skip
    # An experiment's own tags do not follow a sweep run by hand.
    assert again.tags == ["ci"]


def test_a_re_run_finds_another_ready_server_of_the_profile_or_says_to_start_one(
    ready_instance: ServerInstance,
) -> None:
    first = _finished(services.sweep_create(instance=ready_instance, levels=[1], load=LOAD))
    ServerInstance.objects.filter(pk=ready_instance.pk).update(state=InstanceState.STOPPED)
    with pytest.raises(ValidationError) as refused:
        services.sweep_rerun(sweep=first)
    assert refused.value.message_dict["instance"] == [
        f"No server of {ready_instance.profile.name} is ready: start it, then re-run this sweep."
    ]
    other = ServerInstance.objects.create(
        profile=ready_instance.profile, host=ready_instance.host, port=ready_instance.port,
        state=InstanceState.READY, run_id="sd-rerun-other",
    )  # fmt: skip
    assert services.sweep_rerun(sweep=first).instance == other


def test_an_endpoint_sweep_is_re_run_against_its_endpoint(db: Any) -> None:
    endpoint = endpoint_profile("outside", "http://127.0.0.1:30999", served_model_name="m")
    first = _finished(services.sweep_create(endpoint=endpoint, levels=[2], load=LOAD))
    again = services.sweep_rerun(sweep=first)
    assert again.profile == endpoint and again.instance is None
    assert again.base_url == "http://127.0.0.1:30999"


def test_a_running_sweep_or_experiment_is_not_re_run(
    ready_instance: ServerInstance, make_profile: Any
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[1], load=LOAD)
    with pytest.raises(ValidationError, match="re-run it once it has finished"):
        services.sweep_rerun(sweep=sweep)
    experiment = experiment_services.experiment_create(
        profiles=[make_profile(), make_profile()], levels=[1], load=LOAD
    )
    with pytest.raises(ValidationError, match="re-run it once it has finished"):
        experiment_services.experiment_rerun(experiment=experiment)


def test_retry_of_a_failed_experiment_is_a_new_one_with_the_same_settings(
    make_profile: Any,
) -> None:
    a, b = make_profile(name="A profile"), make_profile(name="B profile")
    failed = experiment_services.experiment_create(
        profiles=[b, a], levels=[1, 2], load=LOAD, name="b vs a", repeats=1,
        order="sequential", check_output_equivalence=True, tags=["t"],
    )  # fmt: skip
    Experiment.objects.filter(pk=failed.pk).update(state=ExperimentState.FAILED)
    again = experiment_services.experiment_rerun(experiment=failed)
    assert again.pk != failed.pk and again.state == ExperimentState.QUEUED
    assert [arm.profile for arm in again.arms.order_by("position")] == [b, a]
    assert (again.levels, again.load, again.repeats, again.order) == (
        failed.levels, failed.load, 1, "sequential"
    )  # fmt: skip
    assert again.check_output_equivalence and again.tags == ["t"] and again.name == "b vs a"
    assert again.history[-1]["event"] == "rerun"
    assert again.history[-1]["reason"] == f"same settings as experiment #{failed.pk}"


def test_a_failed_experiments_page_offers_retry_and_to_stop_the_port_holder(
    client: Client, operator: Any, make_profile: Any, ready_instance: ServerInstance
) -> None:
    experiment = experiment_services.experiment_create(
        profiles=[make_profile(), make_profile()], levels=[1], load=LOAD
    )
    experiment_services.experiment_history_note(
        experiment_id=experiment.pk,
        entry={"event": "port_held", "step": 1, "instance": ready_instance.pk},
    )
    Experiment.objects.filter(pk=experiment.pk).update(state=ExperimentState.FAILED)
    client.force_login(operator)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert 'data-testid="rerun-experiment"' in page and ">Retry</button>" in page
    assert f"Server #{ready_instance.pk} ({ready_instance.profile.name}, ready)" in page
    assert f'action="/servers/instances/{ready_instance.pk}/stop/"' in page
    # Once it no longer holds the port, nothing is offered about it.
    ServerInstance.objects.filter(pk=ready_instance.pk).update(state=InstanceState.STOPPED)
    page = client.get(f"/experiments/{experiment.pk}/").content.decode()
    assert 'data-testid="port-holder"' not in page


def _run_of(experiment: Experiment) -> ExperimentRun:
    ctx = JobContext(job_id=0, kind="experiment.run", params={}, worker_id="test")
    plan = ExperimentPlan(
        experiment_id=experiment.pk, name="", levels=[1], load=LOAD, repeats=1, notes="",
        tags=[], continue_on_start_failure=True, check_output_equivalence=False, steps=[],
        user=None,
    )  # fmt: skip
    return ExperimentRun(ctx, plan)


def test_an_experiment_re_uses_a_ready_server_launched_as_its_profile_says(
    transactional_db: Any, make_profile: Any
) -> None:
    profile: ServerProfile = make_profile()
    experiment = experiment_services.experiment_create(
        profiles=[profile, make_profile()], levels=[1], load=LOAD
    )
    run = _run_of(experiment)
    ready = ServerInstance.objects.create(
        profile=profile, host=profile.managed_host, port=profile.port, state="ready",
        run_id="sd-reuse", launch_argv=presets.expand_argv(profile.launch_argv, profile),
    )  # fmt: skip
    assert async_to_sync(run._ready_server_of)(profile.pk) == ready
    # Its lifecycle job runs while the server does (it watches it): still re-used.
    Job.objects.create(kind="server.run", state=JobState.RUNNING,
                       lock_key=host_services.instance_lock_key(ready.pk))  # fmt: skip
    assert async_to_sync(run._ready_server_of)(profile.pk) == ready
    # Busy with a sweep of someone's: not taken from under it.
    sweep = services.sweep_create(instance=ready, levels=[1], load=LOAD)
    assert async_to_sync(run._ready_server_of)(profile.pk) is None
    _finished(sweep)
    assert async_to_sync(run._ready_server_of)(profile.pk) == ready
    # Launched otherwise than the profile says now: a start (and its port conflict) instead.
    ServerInstance.objects.filter(pk=ready.pk).update(launch_argv=["python3", "-m", "other"])
    assert async_to_sync(run._ready_server_of)(profile.pk) is None
