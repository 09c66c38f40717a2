"""The scripted scenario of docs/api.md, run for real: a dashboard subprocess (Daphne + job
worker) with the demo's simulated profiles, driven over HTTP by the docs' own script and by
``manage.py specdash``. Both must produce the comparison the browser flow shows."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.dashboard import serving
from tests.fixtures.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
PASSWORD = "api-scenario-pass-123"
# Tiny levels: the point is the flow, not the measurement.
LEVELS = "1,2"
REQUESTS = "4"
MAX_TOKENS = "16"
SCRIPT_TIMEOUT = 300
# Nine manage.py processes plus server starts and stops, all CPU-bound: set-up and test took 39 s
# on a quiet 2-core machine and 94 s with both cores busy, past the suite's 120 s default under
# heavier load. Each script below is bounded by SCRIPT_TIMEOUT; the module by twice that.
pytestmark = pytest.mark.timeout(2 * SCRIPT_TIMEOUT)


@dataclass
class Board:
    url: str
    env: dict[str, str]
    token: str

    def manage(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True,
            text=True, timeout=timeout,
        )  # fmt: skip


# The demo profiles listen on fixed ports; a test run must not collide with a dashboard (or
# another test run) using them, so they are moved to free ones.
_MOVE_PORTS = """
from hosts.models import ServerProfile
for profile, port in zip(ServerProfile.objects.order_by("name"), {ports}, strict=True):
    argv = list(profile.launch_argv)
    argv[argv.index("--port") + 1] = str(port)
    profile.port, profile.launch_argv = port, argv
    profile.save()
"""


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Board]:
    var = tmp_path_factory.mktemp("api-board")
    port = free_port()
    env = {
        **os.environ,
        "SPECDASH_VAR_DIR": str(var),
        # No real engines: the demo is the two simulated profiles (seed_demo adds vLLM ones
        # when `make engines-vllm` has built them).
        "SPECDASH_ENGINE_CACHE": str(var / "engines"),
        "SPECDASH_DEMO_PASSWORD": PASSWORD,
        "SPECDASH_RUN_ROOT": str(var / "runs"),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("SPECDASH_TOKEN", None)
    board = Board(url=f"http://127.0.0.1:{port}", env=env, token="")
    for args in (("migrate", "--no-input", "-v", "0"), ("seed_demo",)):
        done = board.manage(*args)
        assert done.returncode == 0, done.stderr
    moved = board.manage("shell", "-c", _MOVE_PORTS.format(ports=[free_port(), free_port()]))
    assert moved.returncode == 0, moved.stderr
    made = board.manage("specdash", "token", "--user", "operator", "--name", "scenario")
    assert made.returncode == 0, made.stderr
    board.token = made.stdout.strip()
    with serving(env=env, port=port, log_path=var / "serve.log"):
        yield board


def _docs_script() -> str:
    text = (ROOT / "docs" / "api.md").read_text()
    match = re.search(r"<!-- scenario-script -->\n```python\n(.*?)```", text, re.DOTALL)
    assert match, "docs/api.md lost its scenario script"
    return match.group(1)


def _browser_ratios(board: Board, sweeps: list[int]) -> dict[int, float]:
    """The B/A ratios of the comparison page's CSV, fetched as a logged-in browser does."""
    with httpx.Client(base_url=board.url, timeout=60) as browser:
        browser.get("/accounts/login/")
        login = browser.post(
            "/accounts/login/",
            data={
                "username": "operator", "password": PASSWORD,
                "csrfmiddlewaretoken": browser.cookies["csrftoken"],
            },
            headers={"Referer": board.url + "/accounts/login/"},
        )  # fmt: skip
        assert login.status_code == 302, login.text[:500]
        query = "&".join(f"sweeps={s}" for s in sweeps)
        table = browser.get(f"/compare/table.csv?{query}")
        assert table.status_code == 200, table.text[:500]
    rows = list(csv.DictReader(io.StringIO(table.text)))
    return {int(r["concurrency"]): float(r["B/A_ratio"]) for r in rows}


def _api_ratios(verdicts: list[dict[str, Any]]) -> dict[int, float]:
    (verdict,) = verdicts
    return {int(r["concurrency"]): float(r["point"]) for r in verdict["ratios"]}


def test_the_docs_scenario_script_runs_end_to_end(board: Board, tmp_path: Path) -> None:
    script = tmp_path / "scenario.py"
    script.write_text(_docs_script())
    env = {
        **board.env, "SPECDASH_URL": board.url, "SPECDASH_TOKEN": board.token,
        "SPECDASH_LEVELS": LEVELS, "SPECDASH_REQUESTS": REQUESTS, "SPECDASH_MAX_TOKENS": MAX_TOKENS,
    }  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True,
        timeout=SCRIPT_TIMEOUT,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    baseline, eagle = result["sweeps"]
    ratios = _api_ratios(result["verdicts"])
    assert set(ratios) == {1, 2}
    assert all(r > 0 for r in ratios.values())
    assert "EAGLE-3 / baseline" in done.stdout
    assert ratios == pytest.approx(_browser_ratios(board, [baseline, eagle]))


def test_the_cli_runs_the_same_scenario(board: Board) -> None:
    env_args = ("--url", board.url, "--token", board.token)

    def cli(*args: str) -> str:
        done = board.manage("specdash", *env_args, *args, timeout=SCRIPT_TIMEOUT)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.strip()

    sweeps = []
    for name in ("Simulated SGLang baseline", "Simulated SGLang EAGLE-3"):
        started = cli("start", name, "--wait")
        match = re.fullmatch(r"instance (\d+) ready", started)
        assert match, started
        instance = match.group(1)
        swept = cli(
            "sweep", instance, "--levels", LEVELS, "--requests", REQUESTS,
            "--max-tokens", MAX_TOKENS, "--wait",
        )  # fmt: skip
        sweep_match = re.fullmatch(r"sweep (\d+) completed", swept)
        assert sweep_match, swept
        sweeps.append(int(sweep_match.group(1)))
        assert cli("stop", instance, "--wait") == f"instance {instance} stopped"
    comparison = json.loads(cli("--json", "compare", *map(str, sweeps)))
    assert _api_ratios(comparison["verdicts"]) == pytest.approx(_browser_ratios(board, sweeps))
    summary = cli("compare", *map(str, sweeps))
    assert summary.startswith("B vs A: C=1: ")


def test_the_cli_reports_api_errors_and_exits_non_zero(board: Board) -> None:
    refused = board.manage("specdash", "--url", board.url, "--token", "sdt_wrong", "profiles")
    assert refused.returncode != 0
    assert "401 invalid_token" in refused.stderr
    missing = board.manage("specdash", "--url", board.url, "--token", board.token, "stop", "99999")
    assert missing.returncode != 0 and "404 not_found" in missing.stderr
