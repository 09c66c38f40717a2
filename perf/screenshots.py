"""The comparison page (2 and 4 arms) and its HTML report as screenshots at 1400 px and 1000 px,
into docs/screenshots/: a fresh dashboard on a temporary database (the demo's simulated
servers), a two-arm experiment of the demo profiles and a four-arm parameter matrix of the
EAGLE-3 profile (off and draft lengths 1, 3, 5: the report then carries a schedule), driven
through the REST API, then photographed in Debian's Chromium through Playwright.

    .venv/bin/python -m perf.screenshots     # about 4 minutes on 2 cores

Look at the pictures after a change to the charts or the report: no legend over an axis
title, nothing clipped, the report in the dashboard's colours.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, sync_playwright

from perf.dashboard import ROOT, serving
from perf.ports import free_port

CHROMIUM = "/usr/bin/chromium"
# The throw-away demo login of a temporary database that is deleted with its directory.
PASSWORD = "screenshots-pass-123"  # noqa: S105
OUT = ROOT / "docs" / "screenshots"
WIDTHS = (1400, 1000)
LOAD = {"requests_per_level": 8, "input_tokens": 32, "max_tokens": 32}
LEVELS = [1, 2, 4, 8]


def _manage(env: dict[str, str], *args: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True,
        capture_output=True, text=True, timeout=120,
    ).stdout  # fmt: skip


def _finished(client: httpx.Client, experiment: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not client.get(f"/experiments/{experiment}").json()["finished"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"experiment {experiment} did not finish in {timeout:g} s")
        time.sleep(2)


def _experiments(client: httpx.Client) -> tuple[int, int]:
    profiles = {p["name"]: p["id"] for p in client.get("/profiles").json()["items"]}
    baseline = profiles["Simulated SGLang baseline"]
    eagle = profiles["Simulated SGLang EAGLE-3"]
    body: dict[str, Any] = {"profiles": [baseline, eagle], "levels": LEVELS, "load": LOAD,
                            "repeats": 1, "name": "EAGLE-3 vs baseline"}  # fmt: skip
    two = int(client.post("/experiments", json=body).json()["experiment"]["id"])
    _finished(client, two, 600)
    body = {"profile": eagle, "axes": {"--speculative-num-steps": [1, 3, 5]},
            "include_off": True, "levels": LEVELS, "load": LOAD, "repeats": 1,
            "name": "EAGLE-3 draft lengths"}  # fmt: skip
    four = int(client.post("/experiments/matrix", json=body).json()["experiment"]["id"])
    _finished(client, four, 900)
    return two, four


def _shoot(page: Page, url: str, path: Path, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(url)
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(1500)  # Plotly lays out after load
    page.screenshot(path=str(path), full_page=True)
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KiB)")


def main() -> None:
    var = Path(tempfile.mkdtemp(prefix="specdash-screenshots-"))
    port = free_port()
    env = {
        **os.environ,
        "SPECDASH_VAR_DIR": str(var),
        "SPECDASH_DEMO_PASSWORD": PASSWORD,
        "SPECDASH_ENGINE_CACHE": str(var / "engines"),
        "SPECDASH_RUN_ROOT": str(var / "runs"),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    _manage(env, "migrate", "--no-input", "-v", "0")
    _manage(env, "seed_demo")
    token = _manage(env, "specdash", "token", "--user", "operator").strip().splitlines()[-1]
    with serving(env=env, port=port, log_path=var / "serve.log") as url:
        api = httpx.Client(
            base_url=url + "/api/v1", headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        with api:
            two, four = _experiments(api)
        OUT.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
            )
            context = browser.new_context()
            page = context.new_page()
            page.goto(url + "/accounts/login/")
            page.fill("input[name=username]", "operator")
            page.fill("input[name=password]", PASSWORD)
            page.click("button[type=submit]")
            page.wait_for_url(url + "/")
            for arms, experiment in ((2, two), (4, four)):
                for width in WIDTHS:
                    _shoot(
                        page,
                        f"{url}/experiments/{experiment}/comparison/",
                        OUT / f"comparison-{arms}-arms-{width}.png",
                        width,
                    )
                # The report is a download: saved, then opened from the file.
                with page.expect_download() as download:
                    page.get_by_test_id("download-report").click()
                report = var / f"report-{arms}.html"
                download.value.save_as(report)
                for width in WIDTHS:
                    _shoot(page, report.as_uri(), OUT / f"report-{arms}-arms-{width}.png", width)
            browser.close()


if __name__ == "__main__":
    main()
