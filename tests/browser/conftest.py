"""A real dashboard for browser tests: Daphne and a job worker as subprocesses on a file
database, driven by Debian's Chromium through Playwright."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from specdash.api.client import SpecdashClient
from tests.fixtures.dashboard import serving
from tests.fixtures.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
DEMO_PASSWORD = "browser-demo-pass-123"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class Dashboard:
    url: str
    env: dict[str, str]
    username: str = "operator"
    password: str = DEMO_PASSWORD

    def manage(self, *args: str) -> str:
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, check=True,
            capture_output=True, text=True, timeout=100,  # under a browser test's 120 s
        ).stdout  # fmt: skip


# The states of an instance that still holds its port and its (simulated) GPUs.
HOLDING = ("starting", "loading", "ready", "stopping")
# What a stop ends in (specdash.management.commands.specdash.STOP_SETTLED).
STOP_SETTLED = frozenset({"stopped", "dirty", "failed", "lost"})


def stop_leftover_instances(board: Dashboard) -> list[int]:
    """Stop, through the dashboard's own API, every instance a test left holding its port:
    the dashboard is shared by the session, and a test that failed half-way would otherwise
    leave its server on the profile's port for the next test's start to be refused on."""
    token = board.manage("specdash", "token", "--user", board.username, "--name", "teardown")
    client = SpecdashClient(board.url, token.strip())
    try:
        left = [
            item["id"]
            for state in HOLDING
            for item in client.get("/instances", state=state, limit=200)["items"]
        ]
        for instance_id in left:
            if client.get(f"/instances/{instance_id}")["state"] != "stopping":
                client.post(f"/instances/{instance_id}/stop")
        for instance_id in left:
            client.wait_instance(instance_id, states=STOP_SETTLED, timeout=60)
    finally:
        client.close()
    return left


@pytest.fixture(scope="session")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    var = tmp_path_factory.mktemp("dashboard")
    port = free_port()
    env = {
        **os.environ,
        "SPECDASH_VAR_DIR": str(var),
        # No real engines: the demo is the two simulated profiles (seed_demo adds vLLM ones
        # when `make engines-vllm` has built them).
        "SPECDASH_ENGINE_CACHE": str(var / "engines"),
        "SPECDASH_DEMO_PASSWORD": DEMO_PASSWORD,
        "SPECDASH_RUN_ROOT": str(var / "runs"),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    board = Dashboard(url=f"http://127.0.0.1:{port}", env=env)
    board.manage("migrate", "--no-input", "-v", "0")
    board.manage("seed_demo")
    with serving(env=env, port=port, log_path=var / "serve.log"):
        yield board


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium")
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture(autouse=True)
def no_server_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "dashboard" in request.fixturenames:
        board: Dashboard = request.getfixturevalue("dashboard")
        stop_leftover_instances(board)


@pytest.fixture
def csp_violations() -> list[str]:
    return []


@pytest.fixture
def page(browser: Browser, csp_violations: list[str]) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    # Whatever a browser test does, nothing on the page may break the Content-Security-Policy
    # (a test that provokes a violation on purpose empties the list after checking it).
    violations = csp_violations
    page.on(
        "console",
        lambda msg: violations.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    yield page
    context.close()
    assert violations == [], violations


def login(page: Page, dashboard: Dashboard) -> None:
    page.goto(dashboard.url + "/accounts/login/")
    page.fill("input[name=username]", dashboard.username)
    page.fill("input[name=password]", dashboard.password)
    page.click("button[type=submit]")
    page.wait_for_url(dashboard.url + "/")
