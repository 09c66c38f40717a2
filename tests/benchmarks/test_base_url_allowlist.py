"""SPECDASH_SWEEP_BASE_URLS: a shared deployment limits where a base-URL sweep may point."""

from __future__ import annotations

import pytest
from django.conf import LazySettings
from django.core.exceptions import ValidationError

from benchmarks import services
from benchmarks.models import Sweep
from tests.benchmarks.conftest import load

pytestmark = pytest.mark.django_db


def test_without_a_list_any_http_url_is_accepted(settings: LazySettings) -> None:
    settings.SPECDASH_SWEEP_BASE_URLS = []
    sweep = services.sweep_create(base_url="http://192.0.2.10:8000/v1", levels=[1], load=load())
    assert sweep.base_url == "http://192.0.2.10:8000/v1"


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
        "http://127.0.0.1:8000@198.51.100.1/v1",  # the prefix as user info
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
