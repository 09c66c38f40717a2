"""A dashboard set up before the simulator moved to benchlib/ keeps starting its servers."""

from __future__ import annotations

import importlib

import pytest
from django.apps import apps

from hosts.models import Host, HostKind, ServerProfile

move = importlib.import_module("hosts.migrations.0008_simulator_moved_to_benchlib")


@pytest.mark.django_db
def test_registered_simulators_and_their_hosts_name_the_new_module_after_the_migration() -> None:
    host = Host.objects.create(
        name="local", kind=HostKind.LOCAL, path_prepend="/srv/specdash/benchmarks/simulator/bin"
    )
    old = ["/venv/bin/python", "-m", "benchmarks.simulator", "--port", "30001"]
    sim = ServerProfile.objects.create(name="sim", host=host, launch_argv=old, port=30001)
    other = ServerProfile.objects.create(
        name="real", host=host, launch_argv=["python", "-m", "sglang.launch_server"], port=30002
    )

    move.forwards(apps, None)

    sim.refresh_from_db()
    host.refresh_from_db()
    other.refresh_from_db()
    assert sim.launch_argv == ["/venv/bin/python", "-m", "benchlib.simulator", "--port", "30001"]
    assert host.path_prepend == "/srv/specdash/benchlib/simulator/bin"
    assert other.launch_argv == ["python", "-m", "sglang.launch_server"]

    move.backwards(apps, None)
    sim.refresh_from_db()
    assert sim.launch_argv == old
