"""Host telemetry for an endpoint profile on a registered host: a sweep of a server specdash
did not start samples that host's GPUs and load exactly as a managed server's sweep does (the
same `telemetry.host` job, queued when the sweep begins, its rows kept with the sweep); an
endpoint on no host says on its page why there is no host telemetry."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import Client
from django.utils import timezone

from benchmarks.experiments import services as experiment_services
from benchmarks.experiments.models import Experiment, ExperimentState, ExperimentStep, StepState
from benchmarks.sweeps import selectors, services
from benchmarks.sweeps.models import Sweep, SweepState
from core.jobs.worker import Worker
from hosts.models import Host, HostKind, ServerProfile, TelemetryKind, TelemetrySample
from hosts.telemetry.selectors import (
    ScrapeTarget,
    telemetry_host_plan,
    telemetry_snapshot,
    telemetry_window,
)
from tests.benchmarks.conftest import Simulator
from tests.fixtures.servers import SIM_BIN
from tests.fixtures.sshd import SshServer

SHORT_PROBES = {
    "SPECDASH_TELEMETRY_GPU_INTERVAL_MS": 300,
    "SPECDASH_TELEMETRY_HOST_INTERVAL_S": 0.5,
}
# Long enough for the probes to start and sample several times while the level runs.
LEVEL_LOAD = {"duration": 5, "max_tokens": 8, "input_tokens": 16}


def endpoint_on(host: Host | None, base_url: str, name: str = "outside") -> ServerProfile:
    profile = ServerProfile(
        name=name, kind="endpoint", engine="simulator", base_url=base_url, host=host,
        served_model_name="specdash-sim",
    )  # fmt: skip
    profile.full_clean()
    profile.save()
    return profile


def _running_sweep(profile: ServerProfile) -> Sweep:
    return Sweep.objects.create(
        profile=profile, base_url=profile.base_url, levels=[1], load={"duration": 60},
        state=SweepState.RUNNING, started_at=timezone.now(),
    )  # fmt: skip


def test_a_running_endpoint_sweep_makes_its_host_needed_and_owns_its_samples(
    db: Any, local_host: Host
) -> None:
    assert not telemetry_host_plan(host_id=local_host.pk).needed
    sweep = _running_sweep(endpoint_on(local_host, "http://127.0.0.1:30999"))
    plan = telemetry_host_plan(host_id=local_host.pk)
    assert plan.needed
    # GPU and host rows (no instance) are kept with the sweep, as for a managed server.
    assert plan.host_sweep_id == sweep.pk and plan.sweep_ids == {}
    # Its server is scraped at the base URL's /metrics (no metrics URL given), for this sweep.
    assert plan.scrape == (
        ScrapeTarget(instance_id=None, metrics_url="http://127.0.0.1:30999/metrics", sweep_id=sweep.pk),
    )  # fmt: skip
    window = telemetry_window(target="sweeps", pk=sweep.pk)
    assert window is not None
    assert (window.host_id, window.instance_id) == (local_host.pk, None)
    assert window.endpoint_sweep_id == sweep.pk

    Sweep.objects.filter(pk=sweep.pk).update(state=SweepState.COMPLETED)
    assert not telemetry_host_plan(host_id=local_host.pk).needed


def test_an_endpoint_on_no_host_has_no_telemetry_window(db: Any, local_host: Host) -> None:
    sweep = _running_sweep(endpoint_on(None, "http://10.0.0.5:30000"))
    assert telemetry_window(target="sweeps", pk=sweep.pk) is None
    assert not telemetry_host_plan(host_id=local_host.pk).needed
    assert selectors.sweep_endpoint_host_id(sweep=sweep) is None


def test_the_sweep_page_charts_the_endpoints_host_or_says_why_it_cannot(
    db: Any, local_host: Host, operator: Any
) -> None:
    client = Client()
    client.force_login(operator)
    on_host = _running_sweep(endpoint_on(local_host, "http://127.0.0.1:30999", "on host"))
    page = client.get(f"/sweeps/{on_host.pk}/").content.decode()
    assert f'data-telemetry-ws="/ws/telemetry/sweeps/{on_host.pk}/"' in page
    assert 'data-testid="chart-gpu-memory"' in page
    assert 'data-testid="chart-server"' in page
    assert 'data-testid="no-host-telemetry"' not in page

    nowhere = _running_sweep(endpoint_on(None, "http://10.0.0.5:30000", "no host"))
    page = client.get(f"/sweeps/{nowhere.pk}/").content.decode()
    assert "data-telemetry-ws" not in page
    assert "Host telemetry is not available because the endpoint has no registered host" in page


def _samples_of(sweep_id: int) -> dict[str, list[float]]:
    rows = TelemetrySample.objects.filter(sweep_id=sweep_id).values_list("kind", "t")
    out: dict[str, list[float]] = {}
    for kind, t in rows:
        out.setdefault(kind, []).append(t)
    return out


async def _finished(sweep_id: int, timeout: float = 90) -> Sweep:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        sweep = await Sweep.objects.aget(pk=sweep_id)
        if sweep.is_finished:
            return sweep
        assert asyncio.get_running_loop().time() < deadline, "the sweep did not finish"
        await asyncio.sleep(0.2)


def _assert_sampled_during(sweep: Sweep) -> None:
    assert sweep.state == SweepState.COMPLETED, sweep.reason
    assert sweep.started_at is not None and sweep.finished_at is not None
    began, ended = sweep.started_at.timestamp(), sweep.finished_at.timestamp()
    samples = _samples_of(sweep.pk)
    # GPUs and load of the host, and the endpoint's own /metrics scraped by the same probe
    # and parser a managed instance's are.
    for kind in (TelemetryKind.GPU, TelemetryKind.HOST, TelemetryKind.SERVER):
        during = [t for t in samples.get(kind, []) if began <= t <= ended]
        assert len(during) >= 3, (kind, samples)


def _assert_page_charts_the_server(sweep: Sweep) -> None:
    """What the sweep page draws first (its telemetry snapshot) holds the server's samples
    taken during the sweep, with no instance (the chart's filter for an endpoint)."""
    window = telemetry_window(target="sweeps", pk=sweep.pk)
    assert window is not None and window.endpoint_sweep_id == sweep.pk
    server = [s for s in telemetry_snapshot(window=window)["samples"] if s["k"] == "server"]
    assert len(server) >= 3, server
    assert {s["i"] for s in server} == {None}
    # The simulator counts what the load generator sent it: the scrapes saw it running.
    assert max(s["d"]["running"] for s in server) >= 1, server


@pytest.mark.django_db(transaction=True)
async def test_an_endpoint_sweep_on_the_local_host_samples_its_gpus_load_and_server_metrics(
    simulator: Simulator, tmp_path: Path, settings: Any, worker: Worker
) -> None:
    for name, value in SHORT_PROBES.items():
        setattr(settings, name, value)
    # The simulator's nvidia-smi stand-in, found through the host's PATH settings as a real
    # host's nvidia-smi would be; it reports the ledger of the simulator started above.
    host = await Host.objects.acreate(
        name="local", kind=HostKind.LOCAL, path_prepend=str(SIM_BIN),
        command_env={"SPECDASH_SIM_STATE_DIR": str(tmp_path / "gpu")},
    )  # fmt: skip
    profile = await sync_to_async(endpoint_on)(host, simulator.base_url)
    # No page is open and nothing was started: only the sweep can have queued the probes.
    sweep = await sync_to_async(services.sweep_create)(
        endpoint=profile, levels=[1], load=LEVEL_LOAD
    )
    finished = await _finished(sweep.pk)
    await sync_to_async(_assert_sampled_during)(finished)
    await sync_to_async(_assert_page_charts_the_server)(finished)
    assert simulator.process.poll() is None  # nothing stopped the server


@pytest.mark.sshd
@pytest.mark.django_db(transaction=True)
async def test_an_endpoint_arm_on_a_host_over_ssh_samples_it_during_its_sweep(
    simulator: Simulator, sshd: SshServer, tmp_path: Path, settings: Any, worker: Worker
) -> None:
    for name, value in SHORT_PROBES.items():
        setattr(settings, name, value)
    host = await Host.objects.acreate(
        name="gpu-box", kind=HostKind.SSH, address=sshd.host, ssh_port=sshd.port,
        ssh_user=sshd.user, identity_file=str(sshd.identity_file),
        known_hosts_file=str(sshd.known_hosts_file), path_prepend=str(SIM_BIN),
        command_env={"SPECDASH_SIM_STATE_DIR": str(tmp_path / "gpu")},
    )  # fmt: skip
    # Two arms on one server already running: A registered on the host, B on none.
    on_host = await sync_to_async(endpoint_on)(host, simulator.base_url, "outside over ssh")
    no_host = await sync_to_async(endpoint_on)(None, simulator.base_url, "outside, no host")
    experiment = await sync_to_async(experiment_services.experiment_create)(
        profiles=[on_host, no_host], levels=[1], repeats=1, load=LEVEL_LOAD
    )
    deadline = asyncio.get_running_loop().time() + 120
    while not (await Experiment.objects.aget(pk=experiment.pk)).is_finished:
        assert asyncio.get_running_loop().time() < deadline, "the experiment did not finish"
        await asyncio.sleep(0.2)
    experiment = await Experiment.objects.aget(pk=experiment.pk)
    assert experiment.state == ExperimentState.COMPLETED, experiment.reason
    steps = [s async for s in ExperimentStep.objects.filter(experiment=experiment)]
    assert [s.state for s in steps] == [StepState.DONE, StepState.DONE]
    sweeps = {s.profile_id: s async for s in Sweep.objects.filter(experiment_step__in=steps)}
    await sync_to_async(_assert_sampled_during)(sweeps[on_host.pk])
    # The arm on no host gets none (the probes still lingering on A's host are not its).
    assert not await sync_to_async(_samples_of)(sweeps[no_host.pk].pk)
    # Each run's environment record: the registered host was probed over SSH (its simulated
    # GPUs named), the endpoint on no host says why it was not.
    on_host_probe = sweeps[on_host.pk].environment["host_probe"]
    assert "error" not in on_host_probe, on_host_probe
    assert on_host_probe["gpus"], on_host_probe
    record = sweeps[on_host.pk].environment["records"][-1]
    assert record["probe_error"] is None and record["gpus"], record
    assert sweeps[no_host.pk].environment["host_probe"] == {
        "error": "not probed: the endpoint has no registered host"
    }
