from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User

from core.roles import OPERATORS, VIEWERS, ensure_roles
from hosts.models import Engine, Host, HostKind, ServerProfile
from tests.fixtures.ports import free_port

# Shared fixtures of the suites that start servers (the lifecycle, experiment, telemetry and
# engine tests): the simulator's GPU ledger, leftover clean-up and in-loop job runners; and the
# account of every run (skips fail unless expected, the stage table's records).
pytest_plugins = ["tests.fixtures.servers", "tests.fixtures.stagereport"]


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
