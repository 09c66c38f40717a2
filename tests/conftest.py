from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import Group, User
from django.db import connection

from core.roles import OPERATORS, VIEWERS, ensure_roles
from hosts.models import Engine, Host, HostKind, ServerProfile
from tests.fixtures.ports import free_port

# Shared fixtures of the suites that start servers (the lifecycle, experiment, telemetry and
# engine tests): the simulator's GPU ledger, leftover clean-up and in-loop job runners; and the
# account of every run (skips fail unless expected, the stage table's records).
pytest_plugins = ["tests.fixtures.servers", "tests.fixtures.stagereport"]


@pytest.fixture(autouse=True)
def _no_worker_required(settings: Any) -> None:
    """Most tests queue jobs and run them by hand (or not at all), with no worker beating: the
    refusal of new work without a healthy worker is tested on its own
    (tests/core/jobs/test_worker_health.py), and every dashboard a test starts as a process
    runs with it on."""
    settings.SPECDASH_WORKER_REQUIRED = False


@pytest.fixture
def short_busy_timeout() -> Iterator[float]:
    """SQLite's busy timeout cut to 0.3 s for the connections this test opens, so that a write
    the database refuses (another connection holds its lock) fails at once; put back after,
    with the connection closed so that no later test inherits it."""
    options = django_settings.DATABASES["default"].setdefault("OPTIONS", {})
    before = options.get("timeout")
    options["timeout"] = 0.3
    connection.close()
    yield 0.3
    options["timeout"] = before
    connection.close()


@pytest.fixture
def roles(db: Any) -> None:
    ensure_roles()


@pytest.fixture
def viewer(roles: None) -> User:
    user = User.objects.create_user("viewer", password="viewer-pass-123")
    user.groups.add(Group.objects.get(name=VIEWERS))
    return user


@pytest.fixture
def operator(roles: None) -> User:
    user = User.objects.create_user("op", password="operator-pass-123")
    user.groups.add(Group.objects.get(name=OPERATORS))
    return user


@pytest.fixture
def local_host(db: Any) -> Host:
    return Host.objects.create(name="local", kind=HostKind.LOCAL)


@pytest.fixture
def make_profile(local_host: Host) -> Callable[..., ServerProfile]:
    counter = iter(range(1, 10_000))

    def make(**overrides: Any) -> ServerProfile:
        n = next(counter)
        fields: dict[str, Any] = {
            "name": f"profile {n}",
            "engine": Engine.SIMULATOR,
            "host": local_host,
            "launch_argv": [sys.executable, "-m", "benchlib.simulator"],
            "gpu_ids": [],
        }
        fields.update(overrides)
        if "port" not in fields:
            # Never a port an earlier test used (it may still linger there), nor one from the
            # range outgoing connections take theirs from (perf/ports.py).
            fields["port"] = free_port()
        return ServerProfile.objects.create(**fields)

    return make
