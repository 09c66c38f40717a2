"""Live pages that resolve instead of waiting forever: a sweep that finished before the page's
socket was subscribed fills its table without a reload, and a host without nvidia-smi says
so on the Servers page instead of "waiting for nvidia-smi..."."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, WebSocketRoute, expect

from tests.browser.conftest import Dashboard, login

pytestmark = pytest.mark.browser

RUNNING_SWEEP = """
from django.utils import timezone
from benchmarks.sweeps.models import Sweep, SweepState
sweep = Sweep.objects.create(base_url="http://127.0.0.1:9", levels=[1, 2], load={"duration": 1},
                             state=SweepState.RUNNING, started_at=timezone.now())
print(sweep.pk)
"""
FINISH = """
from django.utils import timezone
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepState
now = timezone.now()
for index, c in enumerate([1, 2]):
    SweepLevel.objects.create(sweep_id={pk}, index=index, concurrency=c, state=LevelState.COMPLETED,
                              requests_ok=4, output_tok_s=100.0 * c, started_at=now, finished_at=now)
Sweep.objects.filter(pk={pk}).update(state=SweepState.COMPLETED, finished_at=now)
"""
# A PATH with python3 alone (the agent's interpreter): nvidia-smi is absent there even on a
# machine that has one elsewhere.
BARE_HOST = """
import os, sys
from django.conf import settings
from hosts.models import Host, ServerProfile
bin_dir = settings.VAR_DIR / "bare-bin"
bin_dir.mkdir(exist_ok=True)
if not (bin_dir / "python3").exists():
    os.symlink(sys.executable, bin_dir / "python3")
host = Host.objects.create(name="bare", kind="local", command_env={"PATH": str(bin_dir)})
ServerProfile.objects.create(name="On a host without nvidia-smi", host=host, engine="custom",
                             launch_argv=[sys.executable, "-m", "benchlib.simulator"], port=30099)
print(host.pk)
"""


def test_a_sweep_finished_before_the_socket_subscribed_fills_its_table_without_reload(
    page: Page, dashboard: Dashboard
) -> None:
    pk = int(dashboard.manage("shell", "-c", RUNNING_SWEEP).split()[-1])
    held: list[WebSocketRoute] = []

    # The page's socket is held back until the sweep has finished: the order a short sweep
    # produces when it ends between the page's render and its subscription.
    def hold(ws: WebSocketRoute) -> None:
        held.append(ws)

    page.route_web_socket(re.compile(rf".*/ws/sweeps/{pk}/$"), hold)
    login(page, dashboard)
    page.goto(f"{dashboard.url}/sweeps/{pk}/")
    page.evaluate("window.__noReload = true")
    table = page.get_by_test_id("levels-table")
    expect(table).to_contain_text("No level has started yet")
    dashboard.manage("shell", "-c", FINISH.format(pk=pk))
    page.wait_for_function("() => true")
    assert len(held) == 1
    held[0].connect_to_server()
    expect(page.get_by_test_id("sweep-state")).to_have_text("Completed")
    expect(page.get_by_test_id("level-row")).to_have_count(2)
    expect(table).not_to_contain_text("No level has started yet")
    assert page.evaluate("window.__noReload") is True


@pytest.fixture
def bare_host(dashboard: Dashboard) -> Iterator[int]:
    pk = int(dashboard.manage("shell", "-c", BARE_HOST).split()[-1])
    yield pk
    dashboard.manage(
        "shell", "-c",
        f"from hosts.models import ServerProfile; ServerProfile.objects.filter(host_id={pk}).delete()",
    )  # fmt: skip


def test_a_host_without_nvidia_smi_says_so_instead_of_waiting(
    page: Page, dashboard: Dashboard, bare_host: int
) -> None:
    login(page, dashboard)
    page.goto(f"{dashboard.url}/servers/")
    bare = page.get_by_test_id("gpu-strip-bare")
    expect(bare).to_contain_text("waiting for nvidia-smi")
    expect(bare.get_by_test_id("gpu-strip-none")).to_contain_text(
        "No GPU readings: nvidia-smi gave none on this host", timeout=40_000
    )
    # The host with the simulator's nvidia-smi on its path draws its GPUs as before.
    expect(page.get_by_test_id("gpu-strip-local").get_by_test_id("gpu-cell").first).to_be_visible()
    expect(page.get_by_test_id("gpu-strip-local").get_by_test_id("gpu-strip-none")).to_have_count(0)
    # Test connection on the same host names the cause.
    page.goto(f"{dashboard.url}/")
    page.get_by_test_id("test-connection-bare").click()
    expect(page.get_by_test_id("probe-report")).to_contain_text("nvidia-smi not found on PATH")
