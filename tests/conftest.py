from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
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


# The files whose tests take longest (seconds summed over their tests, measured on 2 cores with
# two workers): under pytest-xdist they are handed out first, so that the run does not end with
# one worker alone on a long file while the others idle (the Makefile's --no-loadscope-reorder
# keeps this order; xdist would otherwise hand out the files with most tests first). Order only;
# every test still runs.
SLOW_FILES_FIRST = (
    "tests/specdash/api/test_fuzz.py",
    "tests/benchmarks/experiments/test_breakeven_simulated.py",
    "tests/specdash/api/test_auth.py",
    "tests/benchmarks/experiments/test_runner.py",
    "tests/benchmarks/experiments/test_fault_injection.py",
    "tests/benchmarks/experiments/test_workload_simulated.py",
    "tests/hosts/lifecycle/test_torture.py",
    "tests/specdash/test_stage_report.py",
    "tests/benchmarks/test_audit.py",
    "tests/benchlib/loadgen/test_cli.py",
    "tests/benchmarks/experiments/test_verification_simulated.py",
    "tests/hosts/lifecycle/test_start_stop.py",
    "tests/specdash/api/test_scenario.py",
    "tests/benchmarks/sweeps/test_handler.py",
    "tests/specdash/test_access.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return  # a plain run keeps pytest's order
    rank = {path: at for at, path in enumerate(SLOW_FILES_FIRST)}
    # sort is stable: within a file, and among the other files, the order is pytest's.
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each worker has its own test database (named by its pid), and so the
    same sweep and experiment ids as its siblings: give each its own data folder too, so that
    two workers never write one sweep's records."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    data = Path(django_settings.VAR_DIR) / "test-data" / worker
    django_settings.SPECDASH_DATA_DIR = data
    django_settings.SPECDASH_TRACE_DIR = data / "traces"
    os.environ["SPECDASH_DATA_DIR"] = str(data)


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
