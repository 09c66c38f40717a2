"""Controller tracking in a browser: the experiment page draws the adaptive arm's per-second
series beside the static arms' with its switch markers (saved as docs/screenshots/
controller.png with SPECDASH_SCREENSHOTS=1), and the sweep page the adaptive sweep's own."""

from __future__ import annotations

import os

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ROOT, Dashboard, login

# The dashboard fixture (migrate, seed, serve) alone took over 120 s on a busy machine.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]

SCREENSHOT = ROOT / "docs" / "screenshots" / "controller.png"
DRAWN = (
    "() => { const el = document.querySelector('[data-testid=chart-controller]');"
    " return el && el.data && el.data.length > 0; }"
)
NAMES = "() => document.querySelector('[data-testid=chart-controller]').data.map(t => t.name)"


def test_the_adaptive_arm_beside_the_static_ones_with_its_switches(
    page: Page, dashboard: Dashboard
) -> None:
    out = dashboard.manage(
        "shell", "-c", "from tests.browser.controller_data import build; print(build())"
    )
    experiment_id, sweep_id = out.split()[-2:]
    login(page, dashboard)
    page.goto(f"{dashboard.url}/experiments/{experiment_id}/")
    page.wait_for_function(DRAWN)
    names = set(page.evaluate(NAMES))
    assert {"A: tok/s", "B: tok/s", "C: tok/s", "B: switch"} <= names
    assert not {"A: switch", "C: switch"} & names  # the static arms held one level
    switches = page.get_by_test_id("controller-switch")
    expect(switches.first).to_be_visible()
    assert all(row.startswith("B") for row in switches.all_inner_texts())
    if os.environ.get("SPECDASH_SCREENSHOTS") == "1":
        page.set_viewport_size({"width": 1400, "height": 1000})
        page.get_by_test_id("controller-tracking").screenshot(path=str(SCREENSHOT))

    page.goto(f"{dashboard.url}/sweeps/{sweep_id}/")
    page.wait_for_function(DRAWN)
    assert f"sweep #{sweep_id}: switch" in page.evaluate(NAMES)
