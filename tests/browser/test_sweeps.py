"""An operator launches a sweep and watches it live: charts fed over the websocket, the
results table refreshed by htmx on each finished level, no page reload."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.benchmarks.conftest import Simulator, start_simulator
from tests.browser.conftest import Dashboard, login

pytestmark = pytest.mark.browser

PROFILE = "Simulated SGLang baseline"
# A READY instance of the seeded profile, pointing at a simulator this test started: the
# sweep side does not depend on the lifecycle being able to launch the profile.
READY_INSTANCE = """
import json, uuid
from hosts.models import InstanceState, ServerInstance, ServerProfile
profile = ServerProfile.objects.get(name={profile!r})
instance = ServerInstance.objects.create(
    profile=profile, host=profile.host, port={port}, gpu_ids=[], state=InstanceState.READY,
    run_id="sd-test-" + uuid.uuid4().hex[:12], launch_argv={argv!r},
)
print(json.dumps({{"id": instance.pk}}))
"""
# Afterwards the row must not keep the seeded profile "active" for the other browser tests.
STOPPED = "from hosts.models import ServerInstance; ServerInstance.objects.filter(pk={pk}).update(state='stopped')"


@pytest.fixture
def baseline_simulator(tmp_path: Path) -> Iterator[Simulator]:
    sim = start_simulator(tmp_path, "--profile", "baseline")
    try:
        yield sim
    finally:
        sim.kill()


def test_operator_launches_a_sweep_and_watches_charts_and_results_fill_in_live(
    page: Page, dashboard: Dashboard, baseline_simulator: Simulator
) -> None:
    code = READY_INSTANCE.format(
        profile=PROFILE,
        port=baseline_simulator.port,
        argv=["python", "-m", "benchlib.simulator", "--port", str(baseline_simulator.port)],
    )
    out = dashboard.manage("shell", "-c", code)
    instance_id = json.loads(out.strip().splitlines()[-1])["id"]
    try:
        _launch_and_watch(page, dashboard, instance_id)
    finally:
        dashboard.manage("shell", "-c", STOPPED.format(pk=instance_id))


def _launch_and_watch(page: Page, dashboard: Dashboard, instance_id: int) -> None:
    login(page, dashboard)
    page.goto(dashboard.url + "/sweeps/")
    page.get_by_test_id("new-sweep").click()
    page.select_option("select[name=instance]", str(instance_id))
    page.fill("input[name=name]", "live browser sweep")
    page.fill("input[name=levels]", "1, 2, 4")
    page.fill("input[name=requests_per_level]", "")
    page.fill("input[name=duration]", "3")
    page.fill("input[name=max_tokens]", "32")
    page.fill("input[name=input_tokens]", "32")
    page.get_by_test_id("launch-sweep").click()
    page.wait_for_url(f"{dashboard.url}/sweeps/*/")
    # Marks this document: a reload would lose it.
    page.evaluate("window.__noReload = true")

    # Samples reach the throughput and in-flight charts while the sweep runs.
    page.wait_for_function(
        "() => { const el = document.getElementById('chart-tokps');"
        " return el && el.data && el.data[0].x.length >= 2; }",
        timeout=60_000,
    )
    page.wait_for_function(
        "() => document.getElementById('chart-inflight').data[0].y.some(v => v > 0)"
    )
    # The results table fills in level by level, then the sweep completes.
    rows = page.get_by_test_id("level-row")
    expect(rows.first).to_be_visible(timeout=60_000)
    expect(page.locator("[data-testid=level-row][data-state=completed]")).to_have_count(
        3, timeout=90_000
    )
    expect(page.get_by_test_id("sweep-state")).to_have_text("Completed", timeout=30_000)
    # The throughput-vs-concurrency curve grew to one point per level.
    page.wait_for_function(
        "() => document.getElementById('chart-curve').data[0].x.join(',') === '1,2,4'"
    )
    # Level boundaries are marked on the time charts.
    assert page.evaluate("document.getElementById('chart-tokps').layout.shapes.length") == 3
    assert page.evaluate("window.__noReload === true")
    expect(page.get_by_test_id("cancel-sweep")).to_have_count(0)
    expect(page.get_by_test_id("levels-table")).to_contain_text("ITL p50")
