"""Record what a real llama-server sends under speculation, as a fixture for the parser tests.

    .venv/bin/python -m tests.engines.record_llamacpp tests/engines/data/llamacpp-0c1e570

Starts the `make engines` llama-server on the project's GGUF target and draft (agreement 2/3,
`--spec-type draft-simple --spec-draft-n-max 3`), scrapes `/metrics`, sends one level of
requests (two at a time: streamed chat and completions bodies exactly as the load generator
builds them, and one non-streamed completion), scrapes again, and writes the raw response bytes
and both scrapes. Nothing is edited afterwards: the fixture is the server's bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchlib.loadgen.apis import PATHS, Api, build_body
from engines.llamacpp import llamacpp_argv
from engines.models import write_pair
from engines.paths import LLAMA_CPP_PYTHON_VERSION, llama_server_binary

AGREEMENT = 2 / 3
N_MAX = 3  # --spec-draft-n-max, as tests/engines/conftest.py starts the engine tests' servers
MAX_TOKENS = 24
# (api, stream, prompt): each request's own file is req-<i>.<sse|json>.
REQUESTS: list[tuple[Api, bool, str]] = [
    (Api.CHAT, True, "write a poem"),
    (Api.COMPLETIONS, True, "once upon"),
    (Api.CHAT, True, "hello there"),
    (Api.COMPLETIONS, True, "the cat sat"),
    (Api.COMPLETIONS, False, "a long way"),
]


def _ready(base: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(base + "/health", timeout=2).status_code == 200:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"llama-server did not come up: {log.read_text()[-3000:]}")
        time.sleep(0.1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _send(client: httpx.AsyncClient, base: str, api: Api, stream: bool, prompt: str) -> bytes:
    body = build_body(api, model="tiny", prompt=prompt, max_tokens=MAX_TOKENS, temperature=0.0)
    if not stream:
        body.pop("stream_options")
        body["stream"] = False
    async with client.stream("POST", base + PATHS[api], json=body) as response:
        response.raise_for_status()
        return b"".join([chunk async for chunk in response.aiter_raw()])


async def _level(base: str) -> list[bytes]:
    limit = asyncio.Semaphore(2)  # concurrency 2: the requests overlap on the server's slots

    async def one(api: Api, stream: bool, prompt: str) -> bytes:
        async with limit:
            return await _send(client, base, api, stream, prompt)

    async with httpx.AsyncClient(timeout=120) as client:
        return list(await asyncio.gather(*(one(*r) for r in REQUESTS)))


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        pair = write_pair(Path(tmp), agreement=AGREEMENT)
        port = _free_port()
        argv = llamacpp_argv(
            str(llama_server_binary()), str(pair.target), port=port, draft=str(pair.draft),
            draft_n_max=N_MAX, slots=2, context=1024, threads=1,
        )  # fmt: skip
        log = Path(tmp) / "server.log"
        with log.open("wb") as sink:
            process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            _ready(base, process, log)
            before = httpx.get(base + "/metrics", timeout=10).text
            bodies = asyncio.run(_level(base))
            after = httpx.get(base + "/metrics", timeout=10).text
            version = httpx.get(base + "/props", timeout=10).json().get("build_info")
        finally:
            process.terminate()
            process.wait(timeout=30)
    (out / "metrics_before.txt").write_text(before)
    (out / "metrics_after.txt").write_text(after)
    requests: list[dict[str, Any]] = []
    for i, ((api, stream, prompt), body) in enumerate(zip(REQUESTS, bodies, strict=True)):
        name = f"req-{i}.{'sse' if stream else 'json'}"
        (out / name).write_bytes(body)
        requests.append({"file": name, "api": api.value, "stream": stream, "prompt": prompt})
    meta = {
        "engine": "llama-server (llama.cpp tools/server)",
        "llama_cpp_commit": "0c1e570",
        "llama_cpp_python_sdist": LLAMA_CPP_PYTHON_VERSION,
        "build_info": version,
        "argv": ["llama-server", *(a.replace(tmp + "/", "") for a in argv[1:])],
        "models": "engines/models.py write_pair(agreement=2/3): target.gguf + draft",
        "agreement": AGREEMENT,
        "n_max": N_MAX,
        "max_tokens": MAX_TOKENS,
        "concurrency": 2,
        "requests": requests,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
