"""Pages that stay true without a reload: the instance header drops its readiness line once the
server is ready, the actions follow the state (Start again once stopped, no dead Stop)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Dashboard, login

pytestmark = pytest.mark.browser


def test_instance_header_drops_waiting_once_ready_and_a_stopped_instance_offers_start_again(
    page: Page, dashboard: Dashboard
) -> None:
    login(page, dashboard)
    page.click("text=Servers")
    page.locator("tr", has_text="Simulated SGLang EAGLE-3").locator(
        "button", has_text="Start"
    ).click()
    # The page as first served, not once every script and stylesheet is in: the simulator
    # "loads" for 3 s (answering /health with 503), and on a busy machine the page's load
    # event can come after that; the readiness line rendered with the page still says so.
    page.wait_for_url(re.compile(r".*/servers/instances/\d+/$"), wait_until="commit")
    first = page.url
    readiness = page.locator("#instance-readiness")
    expect(readiness).to_contain_text("waiting:", timeout=30_000)
    page.wait_for_load_state("load")
    page.evaluate("window.__noReload = true")
    expect(page.get_by_test_id("instance-state")).to_have_text("ready", timeout=60_000)
    expect(readiness).to_have_text("")
    expect(page.get_by_test_id("start-again")).to_have_count(0)
    with page.expect_navigation():
        page.get_by_test_id("stop").click()
    page.evaluate("window.__noReload = true")
    expect(page.get_by_test_id("instance-state")).to_have_text("stopped", timeout=60_000)
    # The swapped part carries the actions: no Stop that does nothing, a Start again instead.
    expect(page.get_by_test_id("start-again")).to_be_visible()
    expect(page.get_by_test_id("stop")).to_have_count(0)
    expect(readiness).to_have_text("")
    assert page.evaluate("window.__noReload") is True
    page.get_by_test_id("start-again").click()
    page.wait_for_url(re.compile(r".*/servers/instances/\d+/$"))
    assert page.url != first
    expect(page.get_by_test_id("instance-state")).to_have_text("ready", timeout=60_000)
    with page.expect_navigation():
        page.get_by_test_id("stop").click()
    expect(page.get_by_test_id("instance-state")).to_have_text("stopped", timeout=60_000)


def test_test_connection_on_the_overview_answers_in_place(page: Page, dashboard: Dashboard) -> None:
    login(page, dashboard)
    page.evaluate("window.__noReload = true")
    page.get_by_test_id("test-connection-local").click()
    report = page.get_by_test_id("probe-report")
    expect(report.get_by_test_id("probe-ok")).to_be_visible(timeout=30_000)
    expect(report.get_by_test_id("probe-hostname")).not_to_be_empty()
    assert page.evaluate("window.__noReload") is True
    expect(page.get_by_test_id("nav-api-docs")).to_have_attribute("href", "/api/v1/docs")
