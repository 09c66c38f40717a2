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
    state = page.get_by_test_id("instance-state")
    expect(state).to_have_text("ready", timeout=60_000)
    expect(page.locator("#instance-events")).to_contain_text("Ready")
    page.get_by_test_id("stop").click()
    expect(state).to_have_text("stopped", timeout=60_000)
    # The page reloads itself once the state settles, with the verification's evidence.
    expect(page.get_by_test_id("verified-gpu")).to_contain_text("GPU 0:", timeout=10_000)
    baseline = _gpu_values(page.get_by_test_id("baseline-gpu").inner_text())
    verified = _gpu_values(page.get_by_test_id("verified-gpu").inner_text())
    assert baseline and verified == baseline
    expect(page.locator("#instance-events")).to_contain_text(
        "GPU memory back to its level before start"
    )
