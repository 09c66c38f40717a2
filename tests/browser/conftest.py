"""A real dashboard for browser tests: Daphne and a job worker as subprocesses on a file
database, driven by Debian's Chromium through Playwright."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Dashboard:
    url: str
    env: dict[str, str]
    username: str = "operator"
    password: str = DEMO_PASSWORD

    def manage(self, *args: str) -> str:
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, check=True,
            capture_output=True, text=True, timeout=120,
        ).stdout  # fmt: skip


@pytest.fixture(scope="session")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    var = tmp_path_factory.mktemp("dashboard")
    port = free_port()
    env = {
        **os.environ,
        "SPECDASH_VAR_DIR": str(var),
        "SPECDASH_DEMO_PASSWORD": DEMO_PASSWORD,
        "SPECDASH_RUN_ROOT": str(var / "runs"),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    board = Dashboard(url=f"http://127.0.0.1:{port}", env=env)
    board.manage("migrate", "--no-input", "-v", "0")
    board.manage("seed_demo")
    log = (var / "serve.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "manage.py", "serve", "--port", str(port)],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(board.url + "/accounts/login/", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("dashboard did not start:\n" + (var / "serve.log").read_text())
            time.sleep(0.2)
        yield board
    finally:
        os.killpg(server.pid, 15)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, 9)
        log.close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium")
    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    yield page
    context.close()


def login(page: Page, dashboard: Dashboard) -> None:
    page.goto(dashboard.url + "/accounts/login/")
    page.fill("input[name=username]", dashboard.username)
    page.fill("input[name=password]", dashboard.password)
    page.click("button[type=submit]")
    page.wait_for_url(dashboard.url + "/")
