"""The Sweeps and Experiments pages cost the same number of queries however many rows they
show: every related object a row renders is fetched with the list, not one query per row."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from benchmarks.experiments.models import Experiment, ExperimentArm
from benchmarks.sweeps.models import Sweep, SweepState
from hosts.models import Host, HostKind, InstanceState, ServerInstance, ServerProfile

_n = itertools.count(1)


def _profile(make_profile: Callable[..., ServerProfile]) -> ServerProfile:
    host = Host.objects.create(name=f"host {next(_n)}", kind=HostKind.LOCAL)
    return make_profile(host=host)


def _add_sweeps(make_profile: Callable[..., ServerProfile], count: int) -> None:
    for _ in range(count):
        n = next(_n)
        profile = _profile(make_profile)
        instance = ServerInstance.objects.create(
            profile=profile, host=profile.managed_host, port=profile.port, state=InstanceState.READY,
            run_id=f"sd-q-{n}",
        )  # fmt: skip
        Sweep.objects.create(
            name=f"sweep {n}", profile=profile, instance=instance, levels=[1, 2],
            state=SweepState.COMPLETED,
        )  # fmt: skip
        # One against a bare URL, and one rate sweep, so every branch of a row is rendered.
        Sweep.objects.create(base_url=f"http://127.0.0.1:{9000 + n}", levels=[4])
        Sweep.objects.create(profile=profile, levels=[1], load={"request_rate": [0.5, 1.0]})


def _add_experiments(make_profile: Callable[..., ServerProfile], count: int) -> None:
    for _ in range(count):
        experiment = Experiment.objects.create(name=f"experiment {next(_n)}", levels=[1, 4])
        for position, label in enumerate("AB"):
            ExperimentArm.objects.create(
                experiment=experiment, profile=_profile(make_profile), label=label,
                position=position,
            )  # fmt: skip


def _queries(client: Client, url: str) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return len(ctx.captured_queries), response.content.decode()


@pytest.fixture
def client_as_viewer(viewer: User) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


def test_sweep_list_queries_do_not_grow_with_rows(
    client_as_viewer: Client, make_profile: Callable[..., ServerProfile]
) -> None:
    _add_sweeps(make_profile, 1)
    one, _ = _queries(client_as_viewer, "/sweeps/")
    _add_sweeps(make_profile, 4)
    five, body = _queries(client_as_viewer, "/sweeps/")
    assert five == one
    for sweep in Sweep.objects.select_related("profile"):
        assert str(sweep) in body
        assert (sweep.profile.name if sweep.profile else sweep.base_url) in body


def test_experiment_list_queries_do_not_grow_with_rows(
    client_as_viewer: Client, make_profile: Callable[..., ServerProfile]
) -> None:
    _add_experiments(make_profile, 1)
    one, _ = _queries(client_as_viewer, "/experiments/")
    _add_experiments(make_profile, 4)
    five, body = _queries(client_as_viewer, "/experiments/")
    assert five == one
    for arm in ExperimentArm.objects.select_related("experiment", "profile"):
        assert arm.experiment.name in body and f"{arm.label}: {arm.profile.name}" in body
