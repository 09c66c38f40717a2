"""The comparison picker and a profile's history cost the same number of queries however many
sweeps they list: every related object a row shows is fetched with the list."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from benchmarks.experiments.models import Experiment, ExperimentArm, ExperimentStep
from hosts.models import Host, HostKind, ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep

_n = itertools.count(1)


def _queries(client: Client, url: str) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return len(ctx.captured_queries), response.content.decode()


def _picker_rows(make_profile: Callable[..., ServerProfile], tmp: Path, count: int) -> None:
    """Sweeps of their own profiles, each run by a step of its own experiment."""
    for _ in range(count):
        n = next(_n)
        profile = make_profile(host=Host.objects.create(name=f"host {n}", kind=HostKind.LOCAL))
        experiment = Experiment.objects.create(name=f"experiment {n}", levels=[1, 8])
        arm = ExperimentArm.objects.create(experiment=experiment, profile=profile, label="A")
        step = ExperimentStep.objects.create(experiment=experiment, index=0, arm=arm)
        make_sweep(profile, {1: 90, 8: 400}, tmp=tmp, records=False, step=step)


def test_comparison_picker_queries_do_not_grow_with_rows(
    client: Client, viewer: User, make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    client.force_login(viewer)
    _picker_rows(make_profile, tmp_path, 1)
    one, _ = _queries(client, "/compare/")
    _picker_rows(make_profile, tmp_path, 4)
    five, body = _queries(client, "/compare/")
    assert five == one
    for profile in ServerProfile.objects.all():
        assert profile.name in body


def test_profile_history_queries_do_not_grow_with_rows(
    client: Client, viewer: User, make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    client.force_login(viewer)
    profile = make_profile()
    make_sweep(profile, {1: 90, 8: 400}, tmp=tmp_path, records=False)
    one, _ = _queries(client, f"/compare/history/{profile.pk}/")
    for i in range(4):
        make_sweep(profile, {1: 91 + i, 8: 410}, tmp=tmp_path, records=False)
    five, body = _queries(client, f"/compare/history/{profile.pk}/")
    assert five == one
    assert body.count('<tr><td><a href="/sweeps/') == 5
