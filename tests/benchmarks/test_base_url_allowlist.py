"""Where a base-URL sweep may point: registered hosts' addresses, the prefixes listed in
SPECDASH_SWEEP_BASE_URLS ("*": anywhere), or anywhere for staff; the URL normalised first."""

from __future__ import annotations

import pytest
from django.conf import LazySettings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError

from benchmarks.sweeps import services
from benchmarks.sweeps.models import Sweep, SweepState
from core.models import Job
from hosts.models import Host, HostKind
from tests.benchmarks.conftest import load

pytestmark = pytest.mark.django_db


def test_a_star_in_the_list_accepts_any_http_url(settings: LazySettings) -> None:
    settings.SPECDASH_SWEEP_BASE_URLS = ["*"]
    sweep = services.sweep_create(base_url="http://192.0.2.10:8000/v1", levels=[1], load=load())
    assert sweep.base_url == "http://192.0.2.10:8000/v1"


@pytest.mark.parametrize(
    "url",
    [
        "http://192.0.2.10:8000/v1",  # not a registered host
        "http://169.254.169.254/latest/meta-data",  # cloud metadata
        "http://10.0.0.5:6443/api",
        "http://gpu-1.lab@169.254.169.254/",  # a registered name as user info
    ],
)
def test_by_default_an_operator_reaches_only_registered_hosts(
    settings: LazySettings, operator: User, url: str
) -> None:
    settings.SPECDASH_SWEEP_BASE_URLS = []
    Host.objects.create(name="gpu", kind=HostKind.SSH, address="gpu-1.lab")
    with pytest.raises(ValidationError) as info:
        services.sweep_create(base_url=url, levels=[1], load=load(), user=operator)
    assert "base_url" in info.value.message_dict
    assert not Sweep.objects.exists()


def test_registered_hosts_addresses_are_targets_by_default(
    settings: LazySettings, operator: User
) -> None:
    settings.SPECDASH_SWEEP_BASE_URLS = []
    Host.objects.create(name="gpu", kind=HostKind.SSH, address="GPU-1.lab")
    Host.objects.create(name="local", kind=HostKind.LOCAL)
    for url in ("http://gpu-1.lab:30000/v1", "http://127.0.0.1:8001", "http://[::1]:9/v1"):
        assert services.sweep_create(base_url=url, levels=[1], load=load(), user=operator).pk


def test_staff_may_target_any_address(settings: LazySettings) -> None:
    settings.SPECDASH_SWEEP_BASE_URLS = []
    staff = User.objects.create_superuser("admin", password="admin-pass-123")
    sweep = services.sweep_create(
        base_url="http://192.0.2.10:8000/v1", levels=[1], load=load(), user=staff
    )
    assert sweep.base_url == "http://192.0.2.10:8000/v1"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:8000/v1?x=", "no query string"),
        ("http://127.0.0.1:8000/v1#x", "no query string"),
        ("http://127.0.0.1:8000/v1/..%2fadmin", "encoded slash"),
        ("http://127.0.0.1:8000/v1\\..\\admin", "backslash"),
        ("http://u:p@127.0.0.1:8000/v1", "no user name"),
        ("http://127.0.0.1:8000@198.51.100.1/v1", "no user name"),  # the prefix as user info
        ("ftp://127.0.0.1/v1", "http(s) URL"),
    ],
)
def test_urls_that_could_reach_another_path_are_refused(
    settings: LazySettings, url: str, message: str
) -> None:
    settings.SPECDASH_SWEEP_BASE_URLS = ["*"]
    with pytest.raises(ValidationError) as info:
        services.sweep_create(base_url=url, levels=[1], load=load())
    assert message in str(info.value.message_dict["base_url"])
    assert not Sweep.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/v1/../admin",  # dot segments out of the listed prefix
        "http://127.0.0.1:8000/v1/%2e%2e/admin",  # the same, percent-encoded
        "http://127.0.0.1:8000/v1/./../../admin",
    ],
)
def test_dot_segments_are_resolved_before_the_prefix_check(
    settings: LazySettings, url: str
) -> None:
    settings.SPECDASH_SWEEP_BASE_URLS = ["http://127.0.0.1:8000/v1"]
    with pytest.raises(ValidationError) as info:
        services.sweep_create(base_url=url, levels=[1], load=load())
    assert "runs sweeps only against" in str(info.value.message_dict["base_url"])


def test_the_normalised_url_is_the_one_stored(settings: LazySettings) -> None:
    settings.SPECDASH_SWEEP_BASE_URLS = ["http://127.0.0.1:8000/v1"]
    sweep = services.sweep_create(
        base_url="HTTP://127.0.0.1:8000/v1/x/../", levels=[1], load=load()
    )
    assert sweep.base_url == "http://127.0.0.1:8000/v1"
    assert sweep.environment["target"]["base_url"] == "http://127.0.0.1:8000/v1"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000",
        "http://127.0.0.1:8000/v1",
        "http://LOCALHOST:8001/v1/",
        "https://llm.internal/team-a/v1",
    ],
)
def test_a_listed_prefix_is_accepted(settings: LazySettings, url: str) -> None:
    settings.SPECDASH_SWEEP_BASE_URLS = [
        "http://127.0.0.1:8000",
        "http://localhost:8001/v1",
        "https://llm.internal/team-a",
    ]
    assert services.sweep_create(base_url=url, levels=[1], load=load()).pk


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8001/v1",  # another port
        "https://127.0.0.1:8000/v1",  # another scheme
        "http://169.254.169.254/latest/meta-data",  # somewhere else entirely
        "https://llm.internal/team-ab/v1",  # a longer path segment, not the listed one
    ],
)
def test_anything_else_is_a_field_error_and_nothing_is_created(
    settings: LazySettings, url: str
) -> None:
    settings.SPECDASH_SWEEP_BASE_URLS = ["http://127.0.0.1:8000", "https://llm.internal/team-a"]
    with pytest.raises(ValidationError) as info:
        services.sweep_create(base_url=url, levels=[1], load=load())
    assert "runs sweeps only against" in str(info.value.message_dict["base_url"])
    assert not Sweep.objects.exists()


def test_a_resume_is_held_to_the_targets_rule_of_today_not_of_its_creation(
    settings: LazySettings, operator: User
) -> None:
    # A row created while any address was allowed (or before targets were closed) cannot be
    # resumed against an address that the rule now refuses; nothing is queued.
    settings.SPECDASH_SWEEP_BASE_URLS = ["*"]
    sweep = services.sweep_create(
        base_url="http://169.254.169.254/latest", levels=[1], load=load(), user=operator
    )
    Sweep.objects.filter(pk=sweep.pk).update(state=SweepState.INTERRUPTED)
    settings.SPECDASH_SWEEP_BASE_URLS = []
    with pytest.raises(ValidationError) as info:
        services.sweep_resume(sweep=sweep, user=operator)
    assert "base_url" in info.value.message_dict
    sweep.refresh_from_db()
    assert sweep.state == SweepState.INTERRUPTED
    assert Job.objects.filter(kind="sweep.run").count() == 1  # the creation's job only
