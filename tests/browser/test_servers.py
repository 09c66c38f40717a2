from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Dashboard, login

pytestmark = pytest.mark.browser


def _gpu_values(text: str) -> list[int]:
    return [int(v) for v in re.findall(r"GPU \d+: (\d+)", text)]


def test_operator_starts_the_simulated_baseline_sees_it_ready_then_stopped_with_gpu_memory_back(
    page: Page, dashboard: Dashboard
) -> None:
    login(page, dashboard)
    page.click("text=Servers")
    row = page.locator("tr", has_text="Simulated SGLang baseline")
    row.locator("button", has_text="Start").click()
    page.wait_for_url(re.compile(r".*/servers/instances/\d+/$"))
    # From here on the page is never reloaded: each state change swaps its server-rendered
    # part (facts, history, evidence) for a fresh one, and the live parts stay.
    page.evaluate("window.__noReload = true")
    live = page.locator("#instance-live")
    assert live.get_attribute("data-state") != "ready"
    state = page.get_by_test_id("instance-state")
    expect(state).to_have_text("ready", timeout=60_000)
    expect(live).to_have_attribute("data-state", "ready")
    expect(live.locator("dt:has-text('PID') + dd")).not_to_have_text("-")
    expect(page.locator("#instance-events")).to_contain_text("Ready")
    assert page.evaluate("window.__noReload") is True
    with page.expect_navigation():
        page.get_by_test_id("stop").click()  # a form post: this one loads the page
    page.evaluate("window.__noReload = true")
    expect(state).to_have_text("stopped", timeout=60_000)
    # The swapped part carries the verification's evidence.
    expect(live).to_have_attribute("data-state", "stopped")
    expect(page.get_by_test_id("verified-gpu")).to_contain_text("GPU 0:", timeout=10_000)
    assert page.evaluate("window.__noReload") is True
    baseline = _gpu_values(page.get_by_test_id("baseline-gpu").inner_text())
    verified = _gpu_values(page.get_by_test_id("verified-gpu").inner_text())
    assert baseline and verified == baseline
    expect(page.locator("#instance-events")).to_contain_text(
        "GPU memory back to its level before start"
    )
