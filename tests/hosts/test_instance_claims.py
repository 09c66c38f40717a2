from __future__ import annotations

from typing import Any

import pytest

from hosts import services
from hosts.models import GpuClaim, InstanceState, ServerInstance


@pytest.mark.django_db
def test_second_start_on_the_same_port_is_refused_with_a_clear_reason(make_profile: Any) -> None:
    first = make_profile(port=30500)
    second = make_profile(port=30500)
    winner = services.instance_start(profile=first)
    with pytest.raises(
        services.ServerConflict, match=f"Port 30500 .* held by instance #{winner.pk}"
    ):
        services.instance_start(profile=second)
    assert ServerInstance.objects.count() == 1


@pytest.mark.django_db
def test_second_start_on_the_same_gpus_is_refused(make_profile: Any) -> None:
    services.instance_start(profile=make_profile(gpu_ids=[0, 1]))
    with pytest.raises(services.ServerConflict, match="GPU 1"):
        services.instance_start(profile=make_profile(gpu_ids=[1, 2]))
    assert sorted(GpuClaim.objects.values_list("gpu_index", flat=True)) == [0, 1]


@pytest.mark.django_db
def test_claims_are_released_when_the_instance_stops(make_profile: Any) -> None:
    profile = make_profile(gpu_ids=[3])
    instance = services.instance_start(profile=profile)
    for state in (
        InstanceState.LOADING,
        InstanceState.READY,
        InstanceState.STOPPING,
        InstanceState.STOPPED,
    ):
        services.instance_transition(instance_id=instance.pk, state=state)
    assert not GpuClaim.objects.exists()
    again = services.instance_start(profile=profile)
    assert again.pk != instance.pk


@pytest.mark.django_db
def test_a_dirty_instance_keeps_its_gpus(make_profile: Any) -> None:
    profile = make_profile(gpu_ids=[4])
    instance = services.instance_start(profile=profile)
    for state in (
        InstanceState.LOADING,
        InstanceState.READY,
        InstanceState.STOPPING,
        InstanceState.DIRTY,
    ):
        services.instance_transition(instance_id=instance.pk, state=state)
    with pytest.raises(services.ServerConflict):
        services.instance_start(profile=make_profile(gpu_ids=[4]))


@pytest.mark.django_db
def test_state_machine_refuses_impossible_transitions(make_profile: Any) -> None:
    instance = services.instance_start(profile=make_profile())
    with pytest.raises(services.InvalidTransition):
        services.instance_transition(instance_id=instance.pk, state=InstanceState.CRASHED)
    services.instance_transition(
        instance_id=instance.pk, state=InstanceState.FAILED, message="exit 1"
    )
    with pytest.raises(services.InvalidTransition):
        services.instance_transition(instance_id=instance.pk, state=InstanceState.READY)
    instance.refresh_from_db()
    assert instance.state == InstanceState.FAILED
    assert [e.state for e in instance.events.filter(kind="state")] == ["failed"]
