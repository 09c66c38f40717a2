"""Endpoint profiles: servers specdash did not start, registered by URL, swept through the
real sweep job and load generator (readiness asked before the first level and while levels
run), and A/B-tested side by side by an experiment that starts and stops nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import ValidationError

from benchmarks.experiments import services as experiment_services
from benchmarks.experiments.models import Experiment, ExperimentState, ExperimentStep, StepState
from benchmarks.sweeps import endpoints, handler, services
from benchmarks.sweeps.models import Sweep, SweepLevel, SweepState
from core.jobs import JobContext
from core.jobs.worker import Worker
from core.models import Job
from hosts import services as host_services
from hosts.models import Host, ServerInstance, ServerProfile
from tests.benchmarks.conftest import Simulator, load, start_simulator
from tests.fixtures.ports import free_port


def endpoint_profile(name: str, base_url: str, **fields: Any) -> ServerProfile:
    profile = ServerProfile(name=name, kind="endpoint", engine="simulator", base_url=base_url)
    for key, value in fields.items():
        setattr(profile, key, value)
    profile.full_clean()
    profile.save()
    return profile


def _run(sweep: Sweep) -> handler.SweepRunResult:
    assert sweep.job_id is not None
    job = Job.objects.get(pk=sweep.job_id)
    ctx = JobContext(job_id=job.pk, kind=job.kind, params=job.params, worker_id="test")

    async def run() -> handler.SweepRunResult:
        return await asyncio.wait_for(handler.run_sweep(ctx), 90)

    return async_to_sync(run)()


def test_an_endpoint_has_a_url_and_no_host_launch_or_gpus(db: Any, local_host: Host) -> None:
    profile = endpoint_profile("outside", "http://10.0.0.5:30000")
    assert profile.host is None and profile.port == 30000 and profile.launch_argv == []
    with pytest.raises(ValidationError) as refused:
        endpoint_profile("no url", "")
    assert "base_url" in refused.value.message_dict
    with pytest.raises(ValidationError) as refused:
        endpoint_profile("with argv", "http://10.0.0.5:1", launch_argv=["python3"], gpu_ids=[0])
    assert {"launch_argv", "gpu_ids"} <= set(refused.value.message_dict)
    with pytest.raises(ValidationError) as refused:
        endpoint_profile("query", "http://10.0.0.5:1/?x=1")
    assert "base_url" in refused.value.message_dict
    managed = ServerProfile(name="managed without host", launch_argv=["x"], port=1)
    with pytest.raises(ValidationError) as refused:
        managed.full_clean()
    assert "host" in refused.value.message_dict


def test_an_endpoint_is_never_started(db: Any) -> None:
    profile = endpoint_profile("outside", "http://127.0.0.1:30999")
    with pytest.raises(host_services.ServerConflict, match="never starts or stops it"):
        host_services.instance_start(profile=profile, require_worker=False)
    assert not ServerInstance.objects.exists()


def test_an_endpoint_sweep_runs_and_reads_metrics_where_the_profile_says(
    simulator: Simulator, transactional_db: Any
) -> None:
    profile = endpoint_profile(
        "sim outside", simulator.base_url + "/", served_model_name=simulator.model,
        metrics_url=simulator.base_url + "/metrics", api_kind="chat",
    )  # fmt: skip
    sweep = services.sweep_create(
        endpoint=profile, levels=[1, 2], load={"requests_per_level": 4, "max_tokens": 8}
    )
    assert sweep.profile == profile and sweep.instance is None
    assert sweep.base_url == simulator.base_url  # normalised: no trailing slash
    assert sweep.load["api"] == "chat"  # the endpoint's API, as the load did not choose one
    assert sweep.environment["target"]["metrics_url"] == simulator.base_url + "/metrics"
    assert sweep.environment["profile"]["kind"] == "endpoint"
    assert _run(sweep)["state"] == SweepState.COMPLETED
    levels = list(SweepLevel.objects.filter(sweep=sweep).order_by("index"))
    assert [(lv.concurrency, lv.requests_ok) for lv in levels] == [(1, 4), (2, 4)]
    # The engine counters came from the metrics URL over each level.
    assert all(lv.server_metrics for lv in levels), [lv.server_metrics for lv in levels]
    # Nothing stopped the server.
    assert simulator.process.poll() is None


def test_a_sweep_of_an_endpoint_that_is_down_fails_before_any_load_naming_its_url(
    transactional_db: Any,
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    profile = endpoint_profile("down", url, served_model_name="m")
    sweep = services.sweep_create(endpoint=profile, levels=[1], load=load(model="m"))
    assert _run(sweep)["state"] == SweepState.FAILED
    sweep.refresh_from_db()
    assert sweep.reason.startswith("the endpoint is not ready: ")
    assert f"{url}/health did not answer" in sweep.reason
    assert not SweepLevel.objects.filter(sweep=sweep).exists()


def test_a_managed_profile_is_not_swept_as_an_endpoint(db: Any, make_profile: Any) -> None:
    with pytest.raises(ValidationError) as refused:
        services.sweep_create(endpoint=make_profile(), levels=[1], load=load(model="m"))
    assert "endpoint" in refused.value.message_dict


async def test_the_watch_reports_an_endpoint_that_stops_answering() -> None:
    check = endpoints.EndpointCheck(url=f"http://127.0.0.1:{free_port()}/health", status=200)
    settings = endpoints.EndpointWatchSettings(
        poll_seconds=0.01, timeout_seconds=1.0, misses_to_fail=2
    )
    reason = await asyncio.wait_for(endpoints.watch_endpoint(check, settings), 10)
    assert reason.startswith("the endpoint stopped answering its readiness check: ")
    assert check.url in reason


@pytest.fixture
def two_outside(tmp_path: Path) -> Iterator[tuple[Simulator, Simulator]]:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    a = start_simulator(tmp_path / "a", "--profile", "fast")
    try:
        b = start_simulator(tmp_path / "b", "--profile", "fast")
        try:
            yield a, b
        finally:
            b.kill()
    finally:
        a.kill()


@pytest.mark.django_db(transaction=True)
async def test_an_experiment_compares_two_servers_already_running_side_by_side(
    two_outside: tuple[Simulator, Simulator], worker: Worker
) -> None:
    a, b = two_outside
    arm_a = await sync_to_async(endpoint_profile)("outside A", a.base_url)
    arm_b = await sync_to_async(endpoint_profile)("outside B", b.base_url)
    experiment = await sync_to_async(experiment_services.experiment_create)(
        profiles=[arm_a, arm_b], levels=[1, 2], repeats=1,
        load={"requests_per_level": 4, "max_tokens": 8, "input_tokens": 16},
    )  # fmt: skip
    deadline = asyncio.get_running_loop().time() + 90
    while not (await Experiment.objects.aget(pk=experiment.pk)).is_finished:
        assert asyncio.get_running_loop().time() < deadline, "experiment did not finish"
        await asyncio.sleep(0.2)
    experiment = await Experiment.objects.aget(pk=experiment.pk)
    assert experiment.state == ExperimentState.COMPLETED, experiment.reason
    steps = [s async for s in ExperimentStep.objects.filter(experiment=experiment)]
    assert [s.state for s in steps] == [StepState.DONE, StepState.DONE]
    # No server was started (nor stopped): both processes still run.
    assert not await ServerInstance.objects.aexists()
    assert a.process.poll() is None and b.process.poll() is None
    assert [s["label"] for s in experiment.comparison["series"]] == ["A", "B"]
