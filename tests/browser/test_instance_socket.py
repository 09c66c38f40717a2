"""Every live page's socket (static/specdash/live.js) reconnects after a close the server may
recover from, and stops for good after a refusal: a close code from the consumer (4401, 4403,
4404) or 1008, or a reconnect the server refuses during the handshake (which the browser only
sees as a failed socket) while the page itself is now refused too, as for a viewer whose role
was taken away. The top bar says which."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, WebSocketRoute, expect

from tests.browser.conftest import DEMO_PASSWORD, Dashboard, login

pytestmark = pytest.mark.browser

CREATE = """
from hosts.models import InstanceState, ServerInstance, ServerProfile
profile = ServerProfile.objects.order_by("pk").first()
instance = ServerInstance.objects.create(
    profile=profile, host=profile.host, port=profile.port, state=InstanceState.STOPPED,
    run_id="sd-browser-socket-%s",
)
print(instance.pk)
"""

VIEWER = """
from django.contrib.auth.models import Group, User
from core.roles import VIEWERS
user = User.objects.create_user("%s", password="%s")
user.groups.add(Group.objects.get(name=VIEWERS))
"""

REVOKE = """
from django.contrib.auth.models import User
User.objects.get(username="%s").groups.clear()
"""

# The record of the page's socket to the instance group (the telemetry socket is another).
INSTANCE_SOCKET = (
    "() => window.specdashLive.sockets.filter((s) => s.path.startsWith('/ws/instances/'))"
    ".map((s) => ({state: s.state, opened: s.opened, closeCode: s.closeCode,"
    " retryPending: s.retryPending}))"
)


def _instance(dashboard: Dashboard, tag: str) -> int:
    return int(dashboard.manage("shell", "-c", CREATE % tag).strip().splitlines()[-1])


@pytest.mark.parametrize("final", [4403, 4404, 1008])
def test_the_socket_reconnects_after_an_error_and_not_after_a_refusal(
    page: Page, dashboard: Dashboard, final: int
) -> None:
    instance_id = _instance(dashboard, f"code-{final}")
    opened: list[WebSocketRoute] = []

    def serve(ws: WebSocketRoute) -> None:
        # Stands in for the server: the first socket ends with an internal error, the
        # second is refused.
        opened.append(ws)
        ws.close(code=1011 if len(opened) == 1 else final, reason="test")

    page.route_web_socket(f"**/ws/instances/{instance_id}/", serve)
    login(page, dashboard)
    page.goto(f"{dashboard.url}/servers/instances/{instance_id}/")
    status = page.get_by_test_id("live-status")
    expect(status).to_have_attribute("data-state", "refused")
    expect(status).to_be_visible()
    # Refused, with no retry waiting: the second socket was the last.
    assert page.evaluate(INSTANCE_SOCKET) == [
        {"state": "refused", "opened": 2, "closeCode": final, "retryPending": False}
    ]
    assert len(opened) == 2


def test_a_viewer_whose_role_is_taken_away_stops_reconnecting(
    page: Page, dashboard: Dashboard
) -> None:
    instance_id = _instance(dashboard, "revoked")
    username = "revoked-viewer"
    dashboard.manage("shell", "-c", VIEWER % (username, DEMO_PASSWORD))
    page.goto(dashboard.url + "/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", DEMO_PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(dashboard.url + "/")
    page.goto(f"{dashboard.url}/servers/instances/{instance_id}/")
    status = page.get_by_test_id("live-status")
    expect(status).to_have_attribute("data-state", "live")
    assert page.evaluate(INSTANCE_SOCKET)[0]["opened"] == 1

    dashboard.manage("shell", "-c", REVOKE % username)
    # The connection drops (as when the server restarts); the reconnect meets the consumer's
    # refusal, and the page, asked why, is refused as well: no more attempts.
    page.evaluate(
        "() => window.specdashLive.sockets"
        ".find((s) => s.path.startsWith('/ws/instances/')).socket.close(4000)"
    )
    expect(status).to_have_attribute("data-state", "refused")
    socket = page.evaluate(INSTANCE_SOCKET)[0]
    assert socket["state"] == "refused"
    assert socket["opened"] == 2
    assert socket["closeCode"] == 1006  # a refused handshake carries no code of its own
    assert socket["retryPending"] is False
