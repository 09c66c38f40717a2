"""`make run` on a machine where another clone's `make engines` left a built `llama-server`
in the engine cache, with a virtual environment that holds the runtime requirements only: the
set-up (venv, migrate, seed_demo) completes and the dashboard serves its first page.

It creates its own runtime-only venv through the Makefile's own rule (about a minute on
2 cores, pip's cache warm): the shared venv holds the dev requirements, which would hide
exactly the import this guards against."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from engines.paths import LLAMA_CPP_PYTHON_VERSION
from tests.fixtures.ports import free_port
from tests.fixtures.procs import alive

ROOT = Path(settings.BASE_DIR)
PASSWORD = "first-hour-pw"


def _login_and_open_overview(port: int) -> httpx.Response:
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=10) as client:
        login = client.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text)
        assert token, login.text[:500]
        client.post(
            "/accounts/login/",
            data={"username": "operator", "password": PASSWORD,
                  "csrfmiddlewaretoken": token.group(1)},
            headers={"Referer": f"{base}/accounts/login/"},
        )  # fmt: skip
        return client.get("/")


@pytest.mark.timeout(900)
def test_make_run_with_runtime_requirements_only_and_a_built_llama_server_serves(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"  # the Makefile's own rule creates it: requirements.txt only
    var = tmp_path / "var"
    cache = tmp_path / "engines"
    binary = cache / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexit 1\n")  # seed_demo only looks for the file
    binary.chmod(0o755)
    port = free_port()
    env = {**os.environ, "SPECDASH_VAR_DIR": str(var), "SPECDASH_RUN_ROOT": str(var / "runs"),
           "SPECDASH_ENGINE_CACHE": str(cache), "SPECDASH_DEMO_PASSWORD": PASSWORD,
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    for name in ("DJANGO_SETTINGS_MODULE", "VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(name, None)
    log = tmp_path / "make.log"
    with log.open("wb") as out:
        make = subprocess.Popen(
            ["make", "-s", "run", f"VENV={venv}", f"PORT={port}"],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 840
        while True:
            assert make.poll() is None, log.read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=2).is_success:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(1)
        overview = _login_and_open_overview(port)
    finally:
        os.killpg(make.pid, signal.SIGTERM)
        try:
            make.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait(timeout=10)
    output = log.read_text()
    assert overview.status_code == 200 and "Simulated SGLang baseline" in overview.text, output
    assert "Traceback" not in output and "ModuleNotFoundError" not in output, output
    # The dev-only package really is absent, so the guard was what let seed_demo through.
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import gguf"], capture_output=True)
    assert probe.returncode != 0
    assert "llama-server is built" in output and "gguf" in output, output
    assert not (var / "models").exists()  # nothing half-written
    assert not alive(make.pid)
