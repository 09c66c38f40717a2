"""The telemetry probe's GPU reading after a stop is part of the verdict: if it disagrees
with the agent's, the instance is dirty, not stopped."""

from __future__ import annotations

from typing import Any

import pytest

from hosts import services
from hosts.lifecycle import steps, verdicts
from hosts.models import InstanceState, ServerInstance

# Partial answers (typed Any): only the keys the verdict reads of the agent's stop and verify.
CLEAN_VERIFY: Any = {"verdict": "stopped", "reasons": [], "holders": [], "members": []}
STOP: Any = {"terminated": [101, 102], "killed": [], "exit_code": -15}


def _stopping_plan(make_profile: Any) -> steps.Plan:
    instance = services.instance_start(profile=make_profile(gpu_ids=[0, 1]))
    ServerInstance.objects.filter(pk=instance.pk).update(baseline_gpu_memory={"0": 100, "1": 100})
    for state in (InstanceState.LOADING, InstanceState.READY, InstanceState.STOPPING):
        services.instance_transition(instance_id=instance.pk, state=state)
    return steps.load_plan(instance.pk)


@pytest.mark.django_db
def test_a_probe_reading_above_the_baseline_turns_a_clean_verdict_dirty(make_profile: Any) -> None:
    plan = _stopping_plan(make_profile)
    reading = {"index": [0, 1, 2], "used": [100, 9000, 50000], "total": [97887] * 3}
    state = verdicts.finish_stop(plan, reason="Stop requested", stop=STOP, verify=CLEAN_VERIFY,
                              exit_code=None, failed=False, probe_reading=reading)  # fmt: skip
    instance = ServerInstance.objects.get(pk=plan.instance_id)
    assert state == InstanceState.DIRTY == instance.state
    # GPU 2 is not this instance's: its 50 GB belong to someone else and do not count.
    assert (
        "GPU 1 holds 9000 MiB, 8900 MiB above its level before start (telemetry probe)"
        in instance.reason
    )
    assert "GPU 2" not in instance.reason
    assert instance.evidence["gpu_memory_probe"] == reading
    assert instance.gpu_claims.count() == 2  # a dirty GPU stays claimed


@pytest.mark.django_db
def test_agreeing_readers_give_a_verified_stop(make_profile: Any) -> None:
    plan = _stopping_plan(make_profile)
    reading = {"index": [0, 1], "used": [100, 400], "total": [97887, 97887]}  # within 512 MiB
    state = verdicts.finish_stop(plan, reason="Stop requested", stop=STOP, verify=CLEAN_VERIFY,
                              exit_code=None, failed=False, probe_reading=reading)  # fmt: skip
    instance = ServerInstance.objects.get(pk=plan.instance_id)
    assert state == InstanceState.STOPPED == instance.state
    assert instance.evidence["gpu_memory_probe"] == reading
    assert not instance.gpu_claims.exists()


@pytest.mark.django_db
def test_no_probe_reading_leaves_the_agents_verdict(make_profile: Any) -> None:
    plan = _stopping_plan(make_profile)
    state = verdicts.finish_stop(plan, reason="Stop requested", stop=STOP, verify=CLEAN_VERIFY,
                              exit_code=None, failed=False, probe_reading=None)  # fmt: skip
    assert state == InstanceState.STOPPED
