"""Pages that stay true without a reload: the instance header says what a start waits on, even
to a page or a socket that comes after the one broadcast of that stage, and drops the line once
the server is ready; the actions follow the state (Start again once stopped, no dead Stop)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, WebSocketRoute, expect

from tests.browser.conftest import Dashboard, login

pytestmark = pytest.mark.browser

SLOW = "Slow-loading simulator (live header test)"
# The EAGLE-3 demo server on a port of its own, "loading" (/health answers 503) for 20 s, so
# that the test can look at the waiting line on purpose, not in a 3 s race with the machine.
SLOW_PROFILE = f"""
from hosts.models import ServerProfile
demo = ServerProfile.objects.get(name="Simulated SGLang EAGLE-3")
argv = list(demo.launch_argv)
argv[argv.index("--load-seconds") + 1] = "20"
argv[argv.index("--port") + 1] = "30097"
ServerProfile.objects.get_or_create(
    name={SLOW!r},
    defaults=dict(host=demo.host, engine=demo.engine, launch_argv=argv, port=30097,
                  env=demo.env, workdir=demo.workdir, gpu_ids=demo.gpu_ids,
                  readiness_path=demo.readiness_path, readiness_timeout_s=90,
                  served_model_name=demo.served_model_name),
)
"""
# Waits (in the dashboard's database) until the instance's first readiness stage is stored.
STAGE_STORED = """
import time
from hosts.models import ServerInstance
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    readiness = ServerInstance.objects.get(pk={pk}).readiness
    if readiness:
        break
    time.sleep(0.2)
print(readiness)
"""
INSTANCE_PAGE = re.compile(r".*/servers/instances/(\d+)/$")


def test_instance_header_drops_waiting_once_ready_and_a_stopped_instance_offers_start_again(
    page: Page, dashboard: Dashboard
) -> None:
    dashboard.manage("shell", "-c", SLOW_PROFILE)
    held: list[WebSocketRoute] = []
    release = False

    # The instance page's socket is held back until the first readiness stage was probed and
    # broadcast: the order a busy machine or a reconnect produces. What it waits on must then
    # come from the page as served and from the socket's snapshot.
    def hold(ws: WebSocketRoute) -> None:
        if release:
            ws.connect_to_server()
        else:
            held.append(ws)

    page.route_web_socket(re.compile(r".*/ws/instances/\d+/$"), hold)
    login(page, dashboard)
    page.click("text=Servers")
    page.locator("tr", has_text=SLOW).locator("button", has_text="Start").click()
    page.wait_for_url(INSTANCE_PAGE)
    first = page.url
    match = INSTANCE_PAGE.match(first)
    assert match is not None
    stage = dashboard.manage("shell", "-c", STAGE_STORED.format(pk=match[1])).splitlines()[-1]
    assert stage.startswith("health "), stage  # /health answers 503 while the model "loads"
    readiness = page.locator("#instance-readiness")
    # Served after the stage was stored, with its socket still held: the page says it.
    page.reload()
    expect(readiness).to_have_text(f"waiting: {stage}")
    page.evaluate("window.__noReload = true")
    # The socket's snapshot says it too (the line is blanked first to tell the two apart).
    page.evaluate("document.getElementById('instance-readiness').textContent = ''")
    release = True
    held[-1].connect_to_server()  # the reloaded page's (the first one's closed with it)
    expect(readiness).to_have_text(f"waiting: {stage}")
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
    page.wait_for_url(INSTANCE_PAGE)
    assert page.url != first
    # Live this time: the line follows the wait, and a stop while it loads ends it.
    expect(readiness).to_contain_text("waiting: ", timeout=30_000)
    expect(page.get_by_test_id("instance-state")).to_have_text("loading")
    with page.expect_navigation():
        page.get_by_test_id("stop").click()
    expect(page.get_by_test_id("instance-state")).to_have_text("stopped", timeout=60_000)
    expect(readiness).to_have_text("")


def test_test_connection_on_the_overview_answers_in_place(page: Page, dashboard: Dashboard) -> None:
    login(page, dashboard)
    page.evaluate("window.__noReload = true")
    page.get_by_test_id("test-connection-local").click()
    report = page.get_by_test_id("probe-report")
    expect(report.get_by_test_id("probe-ok")).to_be_visible(timeout=30_000)
    expect(report.get_by_test_id("probe-hostname")).not_to_be_empty()
    assert page.evaluate("window.__noReload") is True
    expect(page.get_by_test_id("nav-api-docs")).to_have_attribute("href", "/api/v1/docs")
