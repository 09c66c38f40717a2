"""A viewer opens a sweep page mid-run: the GPU charts draw the recent history first, then
receive live points from the host's GPU stream (the simulator's nvidia-smi stand-in)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page

from tests.browser.conftest import Dashboard, login

pytestmark = pytest.mark.browser

# A READY instance of the seeded profile and a running sweep on it: the telemetry side needs
# only the host behind the page, not a live load.
RUNNING_SWEEP = """
import json, uuid
from django.utils import timezone
from benchmarks.sweeps.models import Sweep, SweepState
from hosts.models import InstanceState, ServerInstance, ServerProfile
profile = ServerProfile.objects.get(name="Simulated SGLang EAGLE-3")
instance = ServerInstance.objects.create(
    profile=profile, host=profile.host, port=1, gpu_ids=[], state=InstanceState.READY,
    run_id="sd-telemetry-" + uuid.uuid4().hex[:12], launch_argv=["true"],
)
sweep = Sweep.objects.create(instance=instance, levels=[1], load={"duration": 60},
                             state=SweepState.RUNNING, started_at=timezone.now())
print(json.dumps({"instance": instance.pk, "sweep": sweep.pk}))
"""
CLEAN_UP = (
    "from benchmarks.sweeps.models import Sweep; from hosts.models import ServerInstance; "
    "Sweep.objects.filter(pk={sweep}).update(state='completed'); "
    "ServerInstance.objects.filter(pk={instance}).update(state='stopped')"
)
POINTS = (
    "() => { const el = document.getElementById('chart-gpu-memory');"
    " return el && el.data ? el.data[0].x.length : 0; }"
)


@pytest.fixture
def running_sweep(dashboard: Dashboard) -> Iterator[dict[str, int]]:
    ids = json.loads(dashboard.manage("shell", "-c", RUNNING_SWEEP).strip().splitlines()[-1])
    try:
        yield ids
    finally:
        dashboard.manage("shell", "-c", CLEAN_UP.format(**ids))


def test_sweep_page_gpu_memory_chart_gets_history_then_live_points(
    page: Page, dashboard: Dashboard, running_sweep: dict[str, int]
) -> None:
    login(page, dashboard)
    page.goto(f"{dashboard.url}/sweeps/{running_sweep['sweep']}/")
    page.evaluate("window.__noReload = true")
    # The page's subscription starts the host's probes; points arrive live.
    page.wait_for_function(f"() => ({POINTS})() >= 3", timeout=60_000)
    first = page.evaluate(POINTS)
    gpus = page.evaluate("() => document.getElementById('chart-gpu-memory').data.length")
    page.wait_for_function(f"() => ({POINTS})() >= {first + 2}", timeout=30_000)
    assert gpus == 8  # the stand-in's default inventory: one stacked trace per GPU
    assert page.evaluate("window.__noReload") is True
    latencies = page.evaluate("window.__telemetryLatencies")
    assert len(latencies) >= 2 and all(ms >= 0 for ms in latencies)

    # A second viewer who opens the page now gets the recent history in its snapshot.
    late = page.context.new_page()
    late.goto(f"{dashboard.url}/sweeps/{running_sweep['sweep']}/")
    late.wait_for_function(f"() => ({POINTS})() >= {first}", timeout=30_000)
    # Those points came in the snapshot, not from waiting for as many live ones.
    assert late.evaluate("window.__telemetrySnapshotPoints") >= first
    late.close()


def test_servers_page_shows_a_live_gpu_strip_per_host(page: Page, dashboard: Dashboard) -> None:
    login(page, dashboard)
    page.goto(f"{dashboard.url}/servers/")
    strip = page.get_by_test_id("gpu-strip-local")
    strip.locator("[data-testid=gpu-cell]").first.wait_for(timeout=60_000)
    assert strip.locator("[data-testid=gpu-cell]").count() == 8
    assert "GPU 0:" in (strip.locator("[data-testid=gpu-cell]").first.get_attribute("title") or "")


# An endpoint profile (a server specdash did not start) registered on the seeded host, and a
# running sweep of it: its page charts that host as a managed server's sweep page does.
ENDPOINT_SWEEP = """
import json
from django.utils import timezone
from benchmarks.sweeps.models import Sweep, SweepState
from hosts.models import ServerProfile
host = ServerProfile.objects.get(name="Simulated SGLang EAGLE-3").host
profile = ServerProfile(
    name="outside on the local host", kind="endpoint", engine="simulator", host=host,
    base_url="http://127.0.0.1:1",
)
profile.full_clean()
profile.save()
sweep = Sweep.objects.create(profile=profile, base_url=profile.base_url, levels=[1],
                             load={"duration": 60}, state=SweepState.RUNNING,
                             started_at=timezone.now())
print(json.dumps({"profile": profile.pk, "sweep": sweep.pk}))
"""
ENDPOINT_CLEAN_UP = (
    "from benchmarks.sweeps.models import Sweep; from hosts.models import ServerProfile; "
    "Sweep.objects.filter(pk={sweep}).delete(); ServerProfile.objects.filter(pk={profile}).delete()"
)


def test_an_endpoint_sweep_page_charts_the_gpus_of_its_registered_host_and_its_server(
    page: Page, dashboard: Dashboard
) -> None:
    ids = json.loads(dashboard.manage("shell", "-c", ENDPOINT_SWEEP).strip().splitlines()[-1])
    try:
        login(page, dashboard)
        page.goto(f"{dashboard.url}/sweeps/{ids['sweep']}/")
        page.wait_for_function(f"() => ({POINTS})() >= 3", timeout=60_000)
        first = page.evaluate(POINTS)
        page.wait_for_function(f"() => ({POINTS})() >= {first + 2}", timeout=30_000)
        assert page.evaluate("() => document.getElementById('chart-gpu-memory').data.length") == 8
        # An endpoint on a registered host gets the live server chart too (its own /metrics,
        # scraped by the host's telemetry job; tests/benchmarks/test_endpoint_telemetry.py
        # checks its samples against a real server): nothing answers at this one's URL.
        assert page.get_by_test_id("chart-server").count() == 1
    finally:
        dashboard.manage("shell", "-c", ENDPOINT_CLEAN_UP.format(**ids))
