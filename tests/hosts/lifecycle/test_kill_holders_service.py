"""The kill of GPU holders is guarded in the service itself, not only in the view and the API
that call it: a caller that hands ``instance_kill_holders`` a process the instance's
verification did not list gets a refusal and nothing is queued, so nothing is killed. The
same call with a listed holder queues a job that does kill it, which is what the refusal
prevents."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from core.models import Job
from hosts import services
from hosts.models import InstanceEvent, InstanceState, ServerInstance, ServerProfile
from tests.fixtures.procs import alive

pytestmark = pytest.mark.django_db(transaction=True)


def start_time_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


@pytest.fixture
def sleepers() -> Iterator[Callable[[], subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start() -> subprocess.Popen[bytes]:
        started.append(subprocess.Popen(["sleep", "300"]))
        return started[-1]

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def holder(proc: subprocess.Popen[bytes]) -> dict[str, int]:
    return {"pid": proc.pid, "start_time": start_time_of(proc.pid)}


def dirty_instance(profile: ServerProfile, holders: list[dict[str, int]]) -> ServerInstance:
    return ServerInstance.objects.create(
        profile=profile, host=profile.managed_host, port=profile.port, gpu_ids=list(profile.gpu_ids),
        state=InstanceState.DIRTY, run_id="sd-kill-holders-test",
        evidence={"holders": [{**h, "comm": "sleep", "gpus": [0]} for h in holders]},
    )  # fmt: skip


def kill_jobs(instance: ServerInstance) -> list[Job]:
    return list(Job.objects.filter(kind="server.kill_holders", params__instance_id=instance.pk))


def test_the_service_refuses_an_unlisted_holder_and_nothing_is_killed(
    sim_profile: Any, sleepers: Callable[[], subprocess.Popen[bytes]]
) -> None:
    listed, unlisted = sleepers(), sleepers()
    instance = dirty_instance(sim_profile(), [holder(listed)])

    for holders in ([holder(unlisted)], [holder(listed), holder(unlisted)]):
        with pytest.raises(services.HoldersNotListed):
            services.instance_kill_holders(instance=instance, holders=holders, confirmed=True)
    # The listed pid with another start time is another process that reused the pid.
    reused = {"pid": listed.pid, "start_time": start_time_of(listed.pid) + 1}
    with pytest.raises(services.HoldersNotListed):
        services.instance_kill_holders(instance=instance, holders=[reused], confirmed=True)
    with pytest.raises(services.HoldersNotListed):
        services.instance_kill_holders(instance=instance, holders=[], confirmed=True)

    assert kill_jobs(instance) == []
    assert not InstanceEvent.objects.filter(instance=instance, kind=InstanceEvent.Kind.ACTION)
    assert alive(unlisted.pid) and unlisted.poll() is None
    assert alive(listed.pid) and listed.poll() is None


def test_the_service_refuses_an_unconfirmed_kill_and_a_kill_on_a_clean_instance(
    sim_profile: Any, sleepers: Callable[[], subprocess.Popen[bytes]]
) -> None:
    proc = sleepers()
    instance = dirty_instance(sim_profile(), [holder(proc)])
    with pytest.raises(services.KillNotConfirmed):
        services.instance_kill_holders(instance=instance, holders=[holder(proc)], confirmed=False)
    ServerInstance.objects.filter(pk=instance.pk).update(state=InstanceState.STOPPED)
    with pytest.raises(services.InvalidTransition):
        services.instance_kill_holders(instance=instance, holders=[holder(proc)], confirmed=True)
    assert kill_jobs(instance) == []
    assert alive(proc.pid)


async def test_a_confirmed_kill_of_a_listed_holder_queues_the_job_that_kills_it(
    jobs: Any, sim_profile: Any, sleepers: Callable[[], subprocess.Popen[bytes]]
) -> None:
    proc = sleepers()
    profile = await sync_to_async(sim_profile)()
    instance = await sync_to_async(dirty_instance)(profile, [holder(proc)])
    await sync_to_async(services.instance_kill_holders)(
        instance=instance, holders=[holder(proc)], confirmed=True
    )
    queued = await sync_to_async(kill_jobs)(instance)
    assert [job.params["holders"] for job in queued] == [[holder(proc)]]
    await asyncio.wait_for(jobs.run_next(instance.pk), 60)
    assert proc.wait(timeout=10) == -9
