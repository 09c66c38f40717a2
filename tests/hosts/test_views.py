"""The instance page's server-rendered part: the page swaps it (htmx) when the instance's
state moves on, so an htmx request gets that fragment alone, behind the same role check."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from hosts.models import InstanceEvent, InstanceState, ServerInstance, ServerProfile

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def instance(make_profile: Callable[..., ServerProfile]) -> ServerInstance:
    profile = make_profile()
    instance = ServerInstance.objects.create(
        profile=profile, host=profile.managed_host, port=profile.port, state=InstanceState.STOPPED,
        run_id="sd-views-1", reason="stopped on request",
    )  # fmt: skip
    InstanceEvent.objects.create(instance=instance, state="stopped", message="Stopped cleanly")
    return instance


def _url(instance: ServerInstance) -> str:
    return reverse("hosts:instance-detail", args=[instance.pk])


@pytest.mark.django_db
def test_an_htmx_request_gets_the_instance_fragment_alone(
    client: Client, viewer: User, instance: ServerInstance
) -> None:
    client.force_login(viewer)
    response = client.get(_url(instance), **HTMX)  # type: ignore[arg-type]
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="instance-live"')
    assert 'data-state="stopped"' in body
    assert "stopped on request" in body
    assert "Stopped cleanly" in body
    # Nothing of the page around it: no layout, no charts, no log, no scripts.
    for outside in ("<html", "topbar", "data-telemetry-ws", 'id="instance-log"', "<script"):
        assert outside not in body, outside


@pytest.mark.django_db
def test_a_plain_request_gets_the_whole_page_with_the_fragment_in_it(
    client: Client, viewer: User, instance: ServerInstance
) -> None:
    client.force_login(viewer)
    body = client.get(_url(instance)).content.decode()
    assert "<html" in body
    assert 'id="instance-live"' in body
    assert 'hx-trigger="instance-changed from:body"' in body
    assert "data-telemetry-ws" in body and 'id="instance-log"' in body


@pytest.mark.django_db
def test_the_fragment_shows_what_the_state_now_is(
    client: Client, viewer: User, instance: ServerInstance
) -> None:
    client.force_login(viewer)
    ServerInstance.objects.filter(pk=instance.pk).update(
        state=InstanceState.DIRTY, evidence={"reasons": ["GPU 0 still holds 900 MiB"]}
    )
    body = client.get(_url(instance), **HTMX).content.decode()  # type: ignore[arg-type]
    assert 'data-state="dirty"' in body
    assert "GPU 0 still holds 900 MiB" in body


@pytest.mark.django_db
def test_the_fragment_is_refused_without_the_viewer_role(
    client: Client, roles: Any, instance: ServerInstance
) -> None:
    nobody = User.objects.create_user("nobody", password="nobody-pass-123")
    client.force_login(nobody)
    response = client.get(_url(instance), **HTMX)  # type: ignore[arg-type]
    assert response.status_code == 403
    assert b"instance-live" not in response.content


@pytest.mark.django_db
def test_the_fragment_is_refused_to_anonymous_clients(
    client: Client, instance: ServerInstance
) -> None:
    response = client.get(_url(instance), **HTMX)  # type: ignore[arg-type]
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
def test_the_fragment_of_an_unknown_instance_is_404(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    response = client.get(reverse("hosts:instance-detail", args=[999_999]), **HTMX)  # type: ignore[arg-type]
    assert response.status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("state", "stop", "start_again"),
    [
        (InstanceState.STARTING, "Stop", False),
        (InstanceState.READY, "Stop", False),
        (InstanceState.STOPPING, None, False),
        (InstanceState.DIRTY, "Stop", False),
        (InstanceState.STOPPED, None, True),
        (InstanceState.FAILED, "Clean up (verified stop)", True),
        (InstanceState.CRASHED, "Clean up (verified stop)", True),
    ],
)
def test_the_swapped_fragment_offers_only_the_actions_the_state_allows(
    client: Client,
    operator: User,
    instance: ServerInstance,
    state: str,
    stop: str | None,
    start_again: bool,
) -> None:
    ServerInstance.objects.filter(pk=instance.pk).update(state=state)
    client.force_login(operator)
    page = client.get(_url(instance), **HTMX).content.decode()  # type: ignore[arg-type]
    stop_button = re.search(r'data-testid="stop">([^<]+)</button>', page)
    assert (stop_button.group(1) if stop_button else None) == stop
    start = reverse("hosts:profile-start", args=[instance.profile_id])
    assert ('data-testid="start-again"' in page) is start_again
    assert (f'action="{start}"' in page) is start_again
