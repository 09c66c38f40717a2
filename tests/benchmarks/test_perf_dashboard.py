"""``perf/dashboard.serving``: the one real-dashboard runner of the tests and the
benchmark scripts (a real ``manage.py serve``, its process group ended on the way out)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from perf import bench_tuning
from perf.dashboard import ROOT, DashboardDidNotStart, serving
from tests.fixtures import dashboard as fixture
from tests.fixtures.ports import free_port


def _env(var: Path) -> dict[str, str]:
    env = {**os.environ, "SPECDASH_VAR_DIR": str(var), "SPECDASH_RUN_ROOT": str(var / "runs"),
           "SPECDASH_ENGINE_CACHE": str(var / "engines"), "PYTHONUNBUFFERED": "1"}  # fmt: skip
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def test_the_fixture_and_the_benchmark_use_the_one_implementation() -> None:
    assert fixture.serving is serving
    assert vars(bench_tuning)["serving"] is serving
    assert not hasattr(bench_tuning, "dashboard")


def test_a_server_that_exits_fails_with_its_log(tmp_path: Path) -> None:
    env = {**_env(tmp_path), "DJANGO_SETTINGS_MODULE": "no_such_settings_module"}
    log = tmp_path / "serve.log"
    refused = pytest.raises(DashboardDidNotStart, match="did not start")
    with refused as caught, serving(env=env, port=free_port(), log_path=log):
        pytest.fail("the block must not run")
    assert "no_such_settings_module" in str(caught.value)


def test_it_serves_the_login_page_and_ends_the_process_group(tmp_path: Path) -> None:
    env = _env(tmp_path)
    migrated = subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=90,  # under the test's 120 s
    )  # fmt: skip
    assert migrated.returncode == 0, migrated.stderr
    port = free_port()
    with serving(env=env, port=port, log_path=tmp_path / "serve.log") as url:
        assert url == f"http://127.0.0.1:{port}"
        assert httpx.get(url + "/accounts/login/", timeout=10).status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/accounts/login/", timeout=2)
