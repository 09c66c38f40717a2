"""The Servers page and the overview cost the same number of queries however many rows they
show: every related object a row renders is fetched with the list, not one query per row."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from hosts.models import (
    Container,
    ContainerKind,
    Host,
    HostKind,
    InstanceState,
    ServerInstance,
    ServerProfile,
)

_n = itertools.count(1)


def _add_rows(make_profile: Callable[..., ServerProfile], count: int) -> None:
    """Rows that each bring their own host, container, profile, instance and starter, so a
    related object fetched per row would show as one more query per row."""
    for _ in range(count):
        n = next(_n)
        host = Host.objects.create(name=f"host {n}", kind=HostKind.LOCAL)
        container = Container.objects.create(host=host, kind=ContainerKind.PCT, ident=str(100 + n))
        profile = make_profile(host=host, container=container, gpu_ids=[0])
        starter = User.objects.create_user(f"starter {n}")
        for state in (InstanceState.READY, InstanceState.STOPPED):
            ServerInstance.objects.create(
                profile=profile, host=host, port=profile.port, state=state, run_id=f"sd-q-{n}-{state}",
                gpu_ids=[0], started_by=starter,
            )  # fmt: skip


def _queries(client: Client, url: str, **headers: Any) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, headers=headers)
    assert response.status_code == 200
    return len(ctx.captured_queries)


@pytest.fixture
def client_as_viewer(viewer: User) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


@pytest.mark.parametrize(
    ("url", "headers"),
    [
        pytest.param("/servers/", {}, id="servers-page"),
        pytest.param("/servers/", {"HX-Request": "true"}, id="servers-instance-table-partial"),
        pytest.param("/", {}, id="overview"),
    ],
)
def test_list_page_queries_do_not_grow_with_rows(
    client_as_viewer: Client,
    make_profile: Callable[..., ServerProfile],
    url: str,
    headers: dict[str, str],
) -> None:
    _add_rows(make_profile, 1)
    one = _queries(client_as_viewer, url, **headers)
    _add_rows(make_profile, 4)
    five = _queries(client_as_viewer, url, **headers)
    assert five == one


def test_servers_page_shows_every_row(
    client_as_viewer: Client, make_profile: Callable[..., ServerProfile]
) -> None:
    # The counts above are only worth something if the rows are really rendered.
    _add_rows(make_profile, 3)
    body = client_as_viewer.get("/servers/").content.decode()
    for instance in ServerInstance.objects.select_related("profile", "host", "started_by"):
        assert instance.profile.name in body and instance.host.name in body
        assert instance.started_by is not None and instance.started_by.username in body
