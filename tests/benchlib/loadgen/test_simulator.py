from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from benchlib.loadgen.apis import Api, OpenAIHandler
from benchlib.loadgen.level import run_level
from benchlib.loadgen.level_config import LevelConfig
from benchlib.loadgen.prompts import SyntheticPrompts
from tests.fixtures.polls import eventually
from tests.fixtures.ports import free_port

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def simulator(tmp_path_factory):
    """The real simulator, eagle3 (several tokens per chunk) with 2 ms decode steps."""
    tmp = tmp_path_factory.mktemp("sim")
    truth = tmp / "truth.jsonl"
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchlib.simulator",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--profile",
            "eagle3",
            "--t0-ms",
            "2",
            "--k-ms",
            "0",
            "--seed",
            "3",
            "--truth-log",
            str(truth),
            "--workers",
            "0",
            "--state-dir",
            str(tmp / "state"),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, "simulator exited"
        try:
            # SGLang-style /health answers after ~1 s (it waits for a generation).
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "simulator not healthy"
        time.sleep(0.1)
    yield url, truth
    proc.terminate()
    proc.wait(10)


def read_truth(path: Path) -> dict[str, dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["request_id"]: r for r in rows}


async def truth_of(path: Path, records) -> dict[str, dict]:
    """The truth log once it has every record's line: the simulator writes a request's line
    after its last chunk, so the client may finish first."""
    wanted = {rec.request_id for rec in records}

    def complete() -> dict[str, dict] | None:
        truth = read_truth(path)
        return truth if wanted <= truth.keys() else None

    return await eventually(complete, timeout=10, what="the truth log's lines of the level")


@pytest.mark.parametrize("api", list(Api))
async def test_records_match_the_simulators_truth_log(simulator, api):
    url, truth_path = simulator
    cfg = LevelConfig(
        api=api,
        base_url=url,
        model="specdash-sim",
        concurrency=4,
        num_requests=12,
        max_tokens=40,
        ignore_eos=True,
        run_id=f"simtest-{api.value}",
    )
    result = await run_level(cfg, SyntheticPrompts(20, seed=5))
    assert result.status == "completed"
    truth = await truth_of(truth_path, result.records)
    multi = 0
    for rec in result.records:
        assert rec.ok, rec.error
        row = truth[rec.request_id]  # matched through the X-Request-Id header
        assert rec.chunk_tokens == [n for _, n in row["chunks"]]
        assert rec.output_tokens == row["completion_tokens"] == 40
        assert rec.prompt_tokens == row["prompt_tokens"]
        assert not rec.chunk_tokens_estimated
        assert rec.finish_reason == row["finish_reason"] == "length"
        multi += sum(n > 1 for n in rec.chunk_tokens)
        # the client sees each chunk after the server sent it, and not much later
        wall = [result.anchor.to_wall(t) for t in rec.chunk_times]
        for (t_server, _), t_client in zip(row["chunks"], wall, strict=True):
            assert t_server - 0.002 <= t_client < t_server + 0.5
        assert result.anchor.to_wall(rec.start) <= row["arrival"] + 0.002
    assert multi > 0  # speculative chunks carried several tokens


@pytest.mark.parametrize("api", [Api.COMPLETIONS, Api.CHAT])
async def test_the_simulators_mid_stream_chunks_take_the_fast_path_and_match_truth(
    simulator, api, monkeypatch
):
    url, truth_path = simulator
    taken = {True: 0, False: 0}
    real = OpenAIHandler.handle_fast

    def counting(self: OpenAIHandler, payload: bytes, now: float) -> bool:
        fast = real(self, payload, now)
        taken[fast] += 1
        return fast

    monkeypatch.setattr(OpenAIHandler, "handle_fast", counting)
    cfg = LevelConfig(
        api=api,
        base_url=url,
        model="specdash-sim",
        concurrency=3,
        num_requests=6,
        max_tokens=30,
        ignore_eos=True,
        run_id=f"simfast-{api.value}",
    )
    result = await run_level(cfg, SyntheticPrompts(20, seed=6))
    assert result.status == "completed"
    truth = await truth_of(truth_path, result.records)
    for rec in result.records:
        assert rec.ok, rec.error
        row = truth[rec.request_id]
        assert rec.chunk_tokens == [n for _, n in row["chunks"]]
        assert rec.output_tokens == row["completion_tokens"] == 30
        assert rec.prompt_tokens == row["prompt_tokens"]
        assert rec.finish_reason == "length"
    chunks = sum(len(r.chunk_times) for r in result.records)
    # every chunk but each request's last (finish reason) and its usage tail went the fast way
    assert taken[True] == chunks - len(result.records)
    assert taken[False] == 2 * len(result.records)
