"""A real llama-server (built by `make engines`) and the project's tiny models.

Every test module here is marked `llamacpp` and runs in CI (`make test` builds the engine first). A
missing binary is a failure that says how to build it, never a skip.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from engines.llamacpp import llamacpp_argv
from engines.models import ModelPair, write_pair
from engines.paths import llama_server_binary
from tests.fixtures.ports import free_port

# Two knob settings whose verify steps are all alike (misses evenly spaced): with
# --spec-draft-n-max 3 each step accepts 2 (agreement 2/3) or 1 (agreement 1/2) draft tokens.
AGREEMENTS = (2 / 3, 1 / 2)
N_MAX = 3
THREADS = 1  # one thread: on a loaded 2-core machine, spinning thread pools stall each other
# Under the 120 s of the tests that may be the first to ask for a server (the start is part
# of their time), so a server that never becomes healthy fails here, with its log.
START_TIMEOUT_S = 100.0


@pytest.fixture(autouse=True)
def _kill_leftovers(kill_leftover_servers: None) -> None:
    """Every test here may start servers: none outlives its test."""


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    binary = llama_server_binary()
    assert binary.is_file(), (
        f"{binary} is missing: run `make engines` (it builds llama-server once)"
    )
    return binary


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> dict[float, ModelPair]:
    out = tmp_path_factory.mktemp("gguf")
    return {a: write_pair(out, agreement=a) for a in AGREEMENTS}


@dataclass
class LlamaServer:
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    argv: list[str]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metrics(self) -> dict[str, float]:
        text = httpx.get(self.base_url + "/metrics", timeout=10).text
        out = {}
        for line in text.splitlines():
            if line.startswith("llamacpp:"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def wait_healthy(base_url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(base_url + "/health", timeout=2).status_code == 200:
                return
        assert process.poll() is None, f"llama-server exited: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"llama-server not healthy: {log.read_text()[-3000:]}"
        time.sleep(0.1)


@pytest.fixture(scope="session")
def start_llama_server(
    llama_server_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., LlamaServer]]:
    """Start llama-server processes (stopped at the end of the session)."""
    started: list[LlamaServer] = []
    logs = tmp_path_factory.mktemp("llama-logs")

    def start(model: Path, draft: Path | None = None, *, slots: int = 8) -> LlamaServer:
        port = free_port()
        argv = llamacpp_argv(
            str(llama_server_bin), str(model), port=port, draft=str(draft) if draft else None,
            draft_n_max=N_MAX, slots=slots, context=slots * 512, threads=THREADS,
        )  # fmt: skip
        log = logs / f"server-{port}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        server = LlamaServer(port=port, process=process, log=log, argv=argv)
        started.append(server)
        wait_healthy(server.base_url, process, log)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def draft_server(
    start_llama_server: Callable[..., LlamaServer], tiny_models: dict[float, ModelPair]
) -> LlamaServer:
    """The speculative server (agreement 2/3), shared by the tests that only send load."""
    pair = tiny_models[AGREEMENTS[0]]
    return start_llama_server(pair.target, pair.draft)


def completion(server: LlamaServer, prompt: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **extra}
    response = httpx.post(server.base_url + "/v1/completions", json=body, timeout=120)
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


def pids_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True
