"""The GPU series of a host reached over a real sshd, with the simulator's nvidia-smi stand-in
found through the host's PATH settings: it rises when a simulated server starts, stays flat
while it serves, and falls after the verified stop."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from hosts import services
from hosts.models import Engine, Host, HostKind, InstanceState, ServerInstance, ServerProfile
from hosts.telemetry import selectors
from hosts.telemetry import service as telemetry
from tests.fixtures.sshd import SshServer
from tests.hosts.lifecycle.conftest import SIM_BIN, free_port, gpu_used_mb
from tests.hosts.telemetry.conftest import TelemetryJob, until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sshd]

ROOT = Path(settings.BASE_DIR)


@pytest.fixture
def ssh_host(sshd: SshServer, sim_state: Path, tmp_path: Path, settings: Any) -> Host:
    settings.SPECDASH_RUN_ROOT = str(tmp_path / "runs")
    settings.SPECDASH_TELEMETRY_GPU_INTERVAL_MS = 300
    settings.SPECDASH_TELEMETRY_HOST_INTERVAL_S = 0.5
    return Host.objects.create(
        name="gpu-box", kind=HostKind.SSH, address=sshd.host, ssh_port=sshd.port,
        ssh_user=sshd.user, identity_file=str(sshd.identity_file),
        known_hosts_file=str(sshd.known_hosts_file), path_prepend=str(SIM_BIN),
        command_env={"SPECDASH_SIM_STATE_DIR": str(sim_state), "SPECDASH_SIM_GPU_COUNT": "4"},
    )  # fmt: skip


def _profile(host: Host, sim_state: Path) -> ServerProfile:
    port = free_port()
    argv = [
        sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1", "--port", str(port),
        "--profile", "fast", "--gpus", "0,1", "--workers", "2", "--gpu-memory-gb", "10",
        "--load-seconds", "1",
    ]  # fmt: skip
    return ServerProfile.objects.create(
        name="sim over ssh", engine=Engine.SIMULATOR, host=host, launch_argv=argv,
        env={"SPECDASH_SIM_STATE_DIR": str(sim_state), "SPECDASH_SIM_GPU_COUNT": "4"},
        workdir=str(ROOT), port=port, gpu_ids=[0, 1], readiness_timeout_s=60,
        served_model_name="specdash-sim",
    )  # fmt: skip


def _gpu_series(host_id: int) -> list[tuple[float, dict[str, Any]]]:
    return selectors.telemetry_series(host_id=host_id, kind="gpu")


def _used(data: dict[str, Any]) -> dict[int, int]:
    return dict(zip(data["index"], data["used"], strict=True))


async def test_gpu_memory_series_rises_at_start_stays_flat_and_falls_after_verified_stop(
    ssh_host: Host, sim_state: Path, jobs: Any
) -> None:
    profile = await sync_to_async(_profile)(ssh_host, sim_state)
    before = gpu_used_mb(sim_state)
    probes = TelemetryJob()
    # An open page claims the host: that queues its telemetry job.
    await sync_to_async(telemetry.telemetry_watch)(host_id=ssh_host.pk)
    await probes.start(ssh_host.pk)
    await until(lambda: len(_gpu_series(ssh_host.pk)) >= 3, what="first GPU samples over ssh")

    instance = await sync_to_async(services.instance_start)(profile=profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await until(
        lambda: ServerInstance.objects.filter(
            pk=instance.pk, state__in=[InstanceState.READY, InstanceState.FAILED]
        ).first(),
        what="instance ready",
    )
    assert ready.state == InstanceState.READY, ready.reason
    during = gpu_used_mb(sim_state)
    assert ready.ready_at is not None
    ready_t = ready.ready_at.timestamp()
    await until(
        lambda: sum(t > ready_t + 2.0 for t, _ in _gpu_series(ssh_host.pk)) >= 3,
        what="GPU samples while serving",
    )
    stop_t = time.time()
    await sync_to_async(services.instance_stop)(instance=ready)
    assert (await asyncio.wait_for(owner, 90))["outcome"] == "stopped"
    stopped = await ServerInstance.objects.aget(pk=instance.pk)
    assert stopped.state == InstanceState.STOPPED, stopped.evidence
    assert stopped.stopped_at is not None
    stopped_t = stopped.stopped_at.timestamp()
    await until(
        lambda: sum(t > stopped_t for t, _ in _gpu_series(ssh_host.pk)) >= 3,
        what="GPU samples after the stop",
    )
    result = await probes.stop()

    series = await sync_to_async(_gpu_series)(ssh_host.pk)
    stream = [(t, _used(d)) for t, d in series]
    created_t = instance.created_at.timestamp()
    assert during[0] > before[0] and during[1] > before[1]
    # Before the start: the level before; while serving: exactly the server's memory.
    assert all(used == before for t, used in stream if t < created_t)
    serving = [used for t, used in stream if ready_t + 0.5 < t < stop_t]
    assert len(serving) >= 3 and all(used == during for used in serving)
    # The first raised sample comes after the start request.
    first_raised = next(t for t, used in stream if used[0] > before[0])
    assert first_raised > created_t
    # After the verified stop every sample is back to the level before.
    after = [used for t, used in stream if t > stopped_t]
    assert len(after) >= 3 and all(used == before for used in after)
    # The stop path read the GPUs with the probe's parser: raised before, released after.
    around_stop = await sync_to_async(
        lambda: [
            _used(d)
            for d in ssh_host.telemetry.filter(instance=instance, kind="gpu")
            .order_by("t")
            .values_list("data", flat=True)
        ]
    )()
    assert around_stop == [during, before]
    assert result["outcome"] == "cancelled" and result["gpu_stream_starts"] >= 1
    assert result["gpu_samples"] == len(series) - 2
