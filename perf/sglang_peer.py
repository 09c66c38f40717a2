"""SGLang 0.5.9's benchmark client as the peer of the side-by-side runs, and their setup.

The peer is `python -m sglang.bench_serving` (aiohttp, one loop), installed on first use into
its own venv under ~/.cache/specdash/peers/ (the sglang wheel with --no-deps, plus only the
packages bench_serving imports; no torch). Its random dataset needs a tokenizer: the project's
own tiny HF tokenizer (engines/models_hf.py) is written beside the venv, and the `random-ids`
dataset draws token ids from it (`random` would fetch ShareGPT), so nothing comes from a hub.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perf.bench_loadgen import MODEL

PEER = "sglang-0.5.9"
PEER_DIR = Path.home() / ".cache" / "specdash" / "peers" / PEER
# What sglang.bench_serving imports at module level (found by importing it in a fresh venv until
# it loaded), pinned to versions that import together: sglang 0.5.9 wants transformers 4.57.1,
# whose huggingface_hub (<1.0) the newest datasets no longer imports with.
PEER_PACKAGES = [
    "aiohttp==3.14.5",
    "numpy==2.4.6",
    "pybase64==1.5.1",
    "requests==2.34.2",
    "datasets==4.0.0",
    "pillow==13.0.0",
    "tqdm==4.70.1",
    "transformers==4.57.1",
    "ipython==9.18.1",
    "pydantic==2.14.4",
]
SIM_PROFILE = "fast"


@dataclass(frozen=True)
class Setup:
    concurrency: int = 256
    requests: int = 2500
    input_len: int = 32
    output_len: int = 96
    sim_http: str = "lean"  # the simulator's HTTP server: lean (one core emits ~2x) or daphne

    @property
    def sim_args(self) -> tuple[str, ...]:
        return ("--t0-ms", "4", "--k-ms", "0.002", "--max-running", "512", "--http", self.sim_http)


def peer_python() -> Path:
    """The peer venv's python, installed on first use (a marker file names what was installed:
    a changed package list installs again)."""
    python = PEER_DIR / "bin" / "python"
    marker = PEER_DIR / ".specdash-installed"
    wanted = " ".join(PEER_PACKAGES) + "\n"
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    print(f"installing {PEER}'s client into {PEER_DIR} (once) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(PEER_DIR)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", "sglang==0.5.9"], check=True)
    subprocess.run([*pip, *PEER_PACKAGES], check=True)
    subprocess.run(
        [str(python), "-m", "sglang.bench_serving", "--help"], check=True, capture_output=True
    )
    marker.write_text(wanted)
    return python


def peer_tokenizer() -> Path:
    """The project's tiny tokenizer (one token per character), for the peer's random dataset."""
    from engines.models_hf import config_json, tokenizer_json  # torch-free, unlike write_model

    out = PEER_DIR.parent / "tokenizer"
    if not (out / "tokenizer.json").exists():
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(config_json()))
        (out / "tokenizer_config.json").write_text(
            json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096})
        )
        (out / "tokenizer.json").write_text(json.dumps(tokenizer_json()))
    return out


def taskset(core: int | None, argv: list[str]) -> list[str]:
    return argv if core is None else ["taskset", "-c", str(core), *argv]


def run_peer(url: str, setup: Setup, tmp: Path, core: int | None) -> dict[str, Any]:
    out = tmp / "peer.jsonl"
    argv = [
        str(peer_python()), "-m", "sglang.bench_serving", "--backend", "sglang-oai",
        "--base-url", url, "--model", MODEL, "--tokenizer", str(peer_tokenizer()),
        "--dataset-name", "random-ids", "--random-input-len", str(setup.input_len),
        "--random-output-len", str(setup.output_len), "--random-range-ratio", "1",
        "--num-prompts", str(setup.requests), "--max-concurrency", str(setup.concurrency),
        "--request-rate", "inf", "--warmup-requests", "1", "--disable-tqdm",
        "--output-file", str(out), "--seed", "1",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run(taskset(core, argv), cwd=tmp, env=env, check=True, stdout=subprocess.DEVNULL)
    res = json.loads(out.read_text().splitlines()[-1])
    return {
        "tok_s": res["output_throughput"],
        "ttft_p50": res["median_ttft_ms"],
        "ttft_p99": res["p99_ttft_ms"],
        "failed": setup.requests - res["completed"],
    }
