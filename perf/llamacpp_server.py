from __future__ import annotations

# A real llama-server for the A/A calibration (`perf/bench_aa.py --llamacpp-experiments N`):
# the build `make engines` caches (engines.paths.llama_server_binary) serving the project's tiny
# target model (engines.models.write_pair), started as tests/engines/conftest.py starts it (one
# thread: spinning thread pools stall each other on a loaded 2-core machine), stopped by its pid.
import contextlib
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from engines.llamacpp import llamacpp_argv
from engines.models import write_pair
from engines.paths import llama_server_binary
from perf.ports import free_port

SLOTS = 8
START_TIMEOUT_S = 120.0


def tiny_target(tmp: Path) -> Path:
    """The tiny target model (written once per directory: the files are a pure function of
    the arguments)."""
    return write_pair(tmp / "gguf").target


@contextlib.contextmanager
def llama_server(model: Path, tmp: Path) -> Iterator[str]:
    """A fresh llama-server on ``model``; yields its base URL."""
    binary = llama_server_binary()
    if not binary.is_file():
        raise RuntimeError(f"{binary} is missing: run `make engines` (it builds llama-server)")
    port = free_port()
    argv = llamacpp_argv(
        str(binary), str(model), port=port, slots=SLOTS, context=SLOTS * 512, threads=1
    )
    log_path = tmp / f"llama-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited: {log_path.read_text()[-2000:]}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(url + "/health", timeout=2) as r,  # noqa: S310
            ):
                if r.status == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError("llama-server did not become healthy")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
