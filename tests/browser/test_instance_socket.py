"""The instance page's socket reconnects after a close the server may recover from, and stops
after a refusal (4xxx from the consumer, 1008), which a retry would only meet again."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, WebSocketRoute

from tests.browser.conftest import Dashboard, login

pytestmark = pytest.mark.browser

CREATE = """
from hosts.models import InstanceState, ServerInstance, ServerProfile
profile = ServerProfile.objects.order_by("pk").first()
instance = ServerInstance.objects.create(
    profile=profile, host=profile.host, port=profile.port, state=InstanceState.STOPPED,
    run_id="sd-browser-socket-%d",
)
print(instance.pk)
"""


@pytest.mark.parametrize("final", [4404, 1008])
def test_the_instance_page_reconnects_after_an_error_and_not_after_a_refusal(
    page: Page, dashboard: Dashboard, final: int
) -> None:
    instance_id = int(dashboard.manage("shell", "-c", CREATE % final).strip().splitlines()[-1])
    opened: list[WebSocketRoute] = []

    def serve(ws: WebSocketRoute) -> None:
        # Stands in for the server: the first socket ends with an internal error, the
        # second is refused.
        opened.append(ws)
        ws.close(code=1011 if len(opened) == 1 else final, reason="test")

    page.route_web_socket(f"**/ws/instances/{instance_id}/", serve)
    login(page, dashboard)
    page.goto(f"{dashboard.url}/servers/instances/{instance_id}/")
    for _ in range(100):  # the route handlers run while playwright waits
        if len(opened) >= 2:
            break
        page.wait_for_timeout(100)
    assert len(opened) == 2
    # The next retry would come within a second (the back-off starts at half a second).
    page.wait_for_timeout(2_500)
    assert len(opened) == 2
