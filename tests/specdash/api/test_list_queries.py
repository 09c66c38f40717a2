"""Every list of the API, and the tokens page, costs the same number of queries however many
rows it returns: every related object a row carries is fetched with the list, not per row."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from benchmarks.experiments.models import Experiment, ExperimentArm
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepSample, SweepState
from core import tokens
from core.models import ApiToken, Job, JobState
from core.tokens import api_token_create
from hosts.models import (
    Container,
    ContainerKind,
    Host,
    HostKind,
    InstanceEvent,
    InstanceState,
    ServerInstance,
    ServerProfile,
)
from tests.specdash.api.conftest import ApiClient

_n = itertools.count(1)


def _user() -> User:
    return User.objects.create_user(f"user {next(_n)}")


def _host() -> Host:
    host = Host.objects.create(name=f"host {next(_n)}", kind=HostKind.LOCAL)
    Container.objects.create(host=host, kind=ContainerKind.PCT, ident=str(next(_n)))
    return host


def _profile(make_profile: Callable[..., ServerProfile]) -> ServerProfile:
    host = _host()
    return make_profile(host=host, container=host.containers.get(), tags=["q"])


def _instance(make_profile: Callable[..., ServerProfile]) -> ServerInstance:
    profile = _profile(make_profile)
    return ServerInstance.objects.create(
        profile=profile, host=profile.managed_host, port=profile.port, state=InstanceState.READY,
        run_id=f"sd-q-{next(_n)}", started_by=_user(),
    )  # fmt: skip


@dataclass
class Rows:
    """Adds rows to one list; ``url(kind)`` is where that list is read (a nested list reads
    the parent its first row created)."""

    make_profile: Callable[..., ServerProfile]
    parent: Any = None

    def add(self, kind: str, count: int) -> None:
        for _ in range(count):
            getattr(self, f"_add_{kind}")()

    def _add_hosts(self) -> None:
        _host()

    def _add_containers(self) -> None:
        _host()

    def _add_profiles(self) -> None:
        _profile(self.make_profile)

    def _add_instances(self) -> None:
        _instance(self.make_profile)

    def _add_events(self) -> None:
        self.parent = self.parent or _instance(self.make_profile)
        InstanceEvent.objects.create(
            instance=self.parent, state=InstanceState.READY, message="up", actor=_user()
        )

    def _add_jobs(self) -> None:
        Job.objects.create(kind="sweep.run", state=JobState.SUCCEEDED, params={"n": next(_n)})

    def _add_sweeps(self) -> None:
        instance = _instance(self.make_profile)
        Sweep.objects.create(
            name=f"sweep {next(_n)}", profile=instance.profile, instance=instance, levels=[1],
            state=SweepState.COMPLETED, created_by=_user(), tags=["q"],
            job=Job.objects.create(kind="sweep.run"),
        )  # fmt: skip

    def _sweep(self) -> Sweep:
        self.parent = self.parent or Sweep.objects.create(
            profile=_profile(self.make_profile), levels=[1, 2, 3, 4, 5, 6]
        )
        return self.parent

    def _add_levels(self) -> None:
        sweep = self._sweep()
        index = sweep.level_results.count()
        SweepLevel.objects.create(
            sweep=sweep, index=index, concurrency=index + 1, state=LevelState.COMPLETED,
            summary={"target_rate": 1.0},
        )  # fmt: skip

    def _add_samples(self) -> None:
        SweepSample.objects.create(sweep=self._sweep(), level_index=0, t=float(next(_n)))

    def _add_experiments(self) -> None:
        experiment = Experiment.objects.create(
            name=f"experiment {next(_n)}", levels=[1], created_by=_user(), tags=["q"],
            job=Job.objects.create(kind="experiment.run"),
        )  # fmt: skip
        for position, label in enumerate("AB"):
            ExperimentArm.objects.create(
                experiment=experiment, profile=_profile(self.make_profile), label=label,
                position=position,
            )  # fmt: skip

    def url(self, kind: str) -> str:
        if kind == "events":
            return f"/api/v1/instances/{self.parent.pk}/events"
        if kind in ("levels", "samples"):
            return f"/api/v1/sweeps/{self.parent.pk}/{kind}"
        return f"/api/v1/{kind}"


def _rows_in(body: Any) -> int:
    return len(body if isinstance(body, list) else body["items"])


def _queries(api: ApiClient, url: str) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as ctx:
        response = api.get(url)
    assert response.status_code == 200, response.content
    return len(ctx.captured_queries), _rows_in(response.json())


@pytest.mark.parametrize(
    "kind",
    [
        "hosts", "containers", "profiles", "instances", "events", "jobs", "sweeps", "levels",
        "samples", "experiments",
    ],
)  # fmt: skip
def test_api_list_queries_do_not_grow_with_rows(
    kind: str,
    as_staff: ApiClient,
    make_profile: Callable[..., ServerProfile],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The token's last-used stamp is written at most once a minute: write it now, and never
    # again during the test, so that write is not counted against either list.
    monkeypatch.setattr(tokens, "LAST_USED_RESOLUTION", timedelta.max)
    assert as_staff.get("/api/v1/hosts").status_code == 200
    rows = Rows(make_profile)
    rows.add(kind, 1)
    one, first_rows = _queries(as_staff, rows.url(kind))
    rows.add(kind, 4)
    five, then_rows = _queries(as_staff, rows.url(kind))
    assert then_rows == first_rows + 4  # the added rows are really in the answer
    assert five == one


def test_tokens_page_queries_do_not_grow_with_rows(viewer: User) -> None:
    client = Client()
    client.force_login(viewer)

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            response = client.get("/account/tokens/")
        assert response.status_code == 200
        body = response.content.decode()
        assert all(
            f'data-testid="revoke-{pk}"' in body
            for pk in ApiToken.objects.values_list("pk", flat=True)
        )
        return len(ctx.captured_queries)

    api_token_create(user=viewer, name="first")
    one = count()
    for i in range(4):
        api_token_create(user=viewer, name=f"more {i}")
    assert count() == one
