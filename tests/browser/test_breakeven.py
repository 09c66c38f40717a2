"""The break-even map's page in a browser: the heat map with its contour and a placed workload
drawn by Plotly, the placement's tables and the kept check (saved as docs/screenshots/
breakeven.png with SPECDASH_SCREENSHOTS=1)."""

from __future__ import annotations

import os

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ROOT, Dashboard, login

# The dashboard fixture (migrate, seed, serve) alone took over 120 s on a busy machine.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

SCREENSHOT = ROOT / "docs" / "screenshots" / "breakeven.png"


def test_the_map_with_a_placed_workload_and_its_check(page: Page, dashboard: Dashboard) -> None:
    out = dashboard.manage(
        "shell", "-c", "from tests.browser.breakeven_data import build; print(build())"
    )
    map_id, sweep_id = out.split()[-2:]
    login(page, dashboard)
    page.goto(f"{dashboard.url}/experiments/{map_id}/breakeven/?sweep={sweep_id}")
    # Drawn: the heat map, the contour and its band (3 lines), and both placed categories.
    page.wait_for_function(
        "() => { const el = document.getElementById('chart-breakeven');"
        " return el && el.data && el.data.length === 6; }"
    )
    names = page.evaluate("() => document.getElementById('chart-breakeven').data.map(t => t.name)")
    assert names[0] == "B/A" and {"chat (placed)", "code (placed)"} <= set(names)
    expect(page.get_by_test_id("placed-category")).to_have_count(2)
    expect(page.get_by_test_id("placed-category").first).to_contain_text("chat")
    expect(page.get_by_test_id("check-summary")).to_contain_text("crossover predicted")
    expect(page.get_by_test_id("verify-prediction")).to_have_count(2)  # operator may verify
    if os.environ.get("SPECDASH_SCREENSHOTS") == "1":
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.screenshot(path=str(SCREENSHOT), full_page=True)
