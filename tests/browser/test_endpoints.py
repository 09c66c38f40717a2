"""A server specdash did not start: a simulator run by hand (here, by the test) is registered
in the admin as an endpoint profile, swept from the servers page, and used as arm B of an
A/B experiment against a managed profile; every page says its process is not specdash's,
and after all of it the server still runs (specdash never stopped it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.benchmarks.conftest import Simulator, start_simulator
from tests.browser.conftest import Dashboard, login
from tests.browser.test_experiments import BASELINE, _option_value

pytestmark = pytest.mark.browser

ENDPOINT = "EAGLE-3 run by hand"


@pytest.fixture
def outside_simulator(tmp_path: Path) -> Iterator[Simulator]:
    # Started the way an operator starts a server by hand: `python -m benchlib.simulator`.
    sim = start_simulator(tmp_path, "--profile", "eagle3")
    try:
        yield sim
    finally:
        sim.kill()


# A sweep and a two-step experiment (one server start and verified stop): about 90 s.
@pytest.mark.timeout(240)
def test_endpoint_of_a_server_started_outside_is_swept_and_is_an_experiment_arm(
    page: Page, dashboard: Dashboard, outside_simulator: Simulator
) -> None:
    login(page, dashboard)
    # Registered from the admin (staff): the servers page's "Register one" link.
    page.goto(dashboard.url + "/servers/")
    page.get_by_test_id("endpoints").get_by_role("link", name="Register one").click()
    expect(page.locator("select[name=kind]")).to_have_value("endpoint")
    page.fill("input[name=name]", ENDPOINT)
    page.select_option("select[name=engine]", "simulator")
    page.fill("input[name=base_url]", outside_simulator.base_url)
    page.check("input[name=speculative]")
    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("was added successfully")

    # Listed apart from the managed profiles, with no Start button, and swept from there.
    page.goto(dashboard.url + "/servers/")
    endpoints = page.get_by_test_id("endpoints")
    row = endpoints.locator("tr", has_text=ENDPOINT)
    expect(row).to_contain_text("not specdash's process")
    expect(row).to_contain_text(outside_simulator.base_url)
    expect(row.get_by_role("button", name="Start")).to_have_count(0)
    row.get_by_role("link", name="Sweep").click()
    page.fill("input[name=levels]", "1, 2")
    page.fill("input[name=requests_per_level]", "8")
    page.fill("input[name=input_tokens]", "32")
    page.fill("input[name=max_tokens]", "32")
    page.get_by_test_id("launch-sweep").click()
    page.wait_for_url(f"{dashboard.url}/sweeps/*/")
    expect(page.get_by_test_id("not-specdash-process")).to_be_visible()
    expect(page.get_by_test_id("sweep-state")).to_have_text("Completed", timeout=120_000)
    expect(page.locator("#sweep-reason")).to_have_text("-")

    # A/B: the managed baseline (started and stopped by specdash) against the endpoint.
    page.goto(dashboard.url + "/experiments/new/")
    page.select_option(
        "select[name=profile_a]", _option_value(page, "select[name=profile_a]", BASELINE)
    )
    page.select_option(
        "select[name=profile_b]", _option_value(page, "select[name=profile_b]", ENDPOINT)
    )
    page.fill("input[name=name]", "endpoint against managed, browser")
    page.fill("input[name=levels]", "1, 2")
    page.fill("input[name=requests_per_level]", "8")
    page.fill("input[name=input_tokens]", "32")
    page.fill("input[name=max_tokens]", "32")
    page.fill("input[name=repeats]", "1")
    page.get_by_test_id("launch-experiment").click()
    page.wait_for_url(f"{dashboard.url}/experiments/*/")
    expect(page.locator("[data-testid=step-row][data-state=done]")).to_have_count(
        2, timeout=240_000
    )
    expect(page.get_by_test_id("experiment-state")).to_have_text("Completed", timeout=60_000)
    expect(page.get_by_test_id("steps-table")).to_contain_text("not specdash's process")
    expect(page.get_by_test_id("verdict")).to_contain_text(f"B ({ENDPOINT}) against A ({BASELINE})")

    # Nothing stopped the endpoint's server: the same process still answers.
    assert outside_simulator.process.poll() is None
    assert httpx.get(outside_simulator.base_url + "/health", timeout=10).status_code == 200
