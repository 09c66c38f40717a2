"""Reasoning streams: the simulator in reasoning mode streams a chat request's first tokens as
reasoning (vLLM 0.32's `delta.reasoning`, SGLang's `delta.reasoning_content`) and the rest as the
answer; the load generator's time to the first reasoning token and to the first answer token,
and its per-phase token gaps, are checked against the simulator's truth log."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchlib.loadgen.apis import Api, OpenAIHandler
from benchlib.loadgen.level import LevelConfig, run_level
from benchlib.loadgen.prompts import SyntheticPrompts
from benchlib.loadgen.reasoning import reasoning_figures
from benchlib.loadgen.records import RequestRecord
from benchlib.simulator.encode import StreamEncoder
from benchlib.simulator.protocol import GenRequest
from tests.benchlib.loadgen.test_simulator import truth_of
from tests.fixtures.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
REASONING = 25  # not a multiple of eagle3's tokens per step: some steps cross the boundary
MAX_TOKENS = 60


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def reasoning_simulator(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path, str]]:
    """The simulator in reasoning mode (eagle3: several tokens a step), in each engine's style."""
    style = str(request.param)
    tmp = tmp_path_factory.mktemp(f"reasoning-{style}")
    truth = tmp / "truth.jsonl"
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1", "--port", str(port),
         "--profile", "eagle3", "--t0-ms", "2", "--k-ms", "0", "--seed", "3",
         "--metrics-style", style, "--reasoning-tokens", str(REASONING),
         "--truth-log", str(truth), "--workers", "0", "--state-dir", str(tmp / "state")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, "simulator exited"
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        assert time.monotonic() < deadline, "simulator not up"
        time.sleep(0.1)
    yield url, truth, style
    proc.terminate()
    proc.wait(10)


def test_a_step_crossing_into_the_answer_is_two_events_in_the_engines_field() -> None:
    fields = {"vllm": b'"reasoning":"', "sglang": b'"content":null,"reasoning_content":"'}
    for style, field in fields.items():
        req = GenRequest(kind="chat", model="m", prompt_tokens=3, max_tokens=8, stream=True,
                         ignore_eos=True, include_usage=True, continuous_usage=True)  # fmt: skip
        encoder = StreamEncoder(req, "r", 0, sglang=style == "sglang", reasoning_tokens=5)
        events = encoder.chunk(3, 4, None).split(b"\n\n")[:-1]
        assert len(events) == 2
        assert field in events[0] and b'"content":"' in events[1]
        assert b'"role":"assistant"' in encoder.chunk(0, 2, None)


async def test_phase_first_tokens_and_gaps_match_the_truth_log(
    reasoning_simulator: tuple[str, Path, str],
) -> None:
    url, truth_path, style = reasoning_simulator
    cfg = LevelConfig(
        api=Api.CHAT, base_url=url, model="specdash-sim", concurrency=3, num_requests=9,
        max_tokens=MAX_TOKENS, ignore_eos=True, run_id=f"reasoning-{style}",
    )  # fmt: skip
    result = await run_level(cfg, SyntheticPrompts(20, seed=5))
    assert result.status == "completed"
    truth = await truth_of(truth_path, result.records)
    crossed = 0
    for rec in result.records:
        assert rec.ok, rec.error
        row = truth[rec.request_id]
        assert rec.reasoning_tokens == row["reasoning_tokens"] == REASONING
        assert rec.output_tokens == row["completion_tokens"] == MAX_TOKENS
        # The first reasoning token is the stream's first; the first answer token arrives with
        # the server's step that took the count past the reasoning.
        cumulative, answer_sent = 0, None
        for t, n in row["chunks"]:
            if cumulative + n > REASONING:
                answer_sent = t
                crossed += cumulative < REASONING
                break
            cumulative += n
        assert answer_sent is not None and rec.first_answer is not None
        assert rec.first_token is not None
        first_token = result.anchor.to_wall(rec.first_token)
        first_answer = result.anchor.to_wall(rec.first_answer)
        assert row["chunks"][0][0] - 0.002 <= first_token < row["chunks"][0][0] + 0.5
        assert answer_sent - 0.002 <= first_answer < answer_sent + 0.5
    assert crossed > 0  # some steps carried the last reasoning and the first answer tokens
    figures = reasoning_figures(result.records)
    assert figures is not None
    assert figures["requests"] == figures["answered"] == 9
    assert figures["ttft_answer_ms"]["p50"] > figures["ttft_reasoning_ms"]["p50"]
    assert figures["itl_reasoning_ms"]["count"] == figures["itl_answer_ms"]["count"] == 9


def test_per_phase_figures_from_records() -> None:
    rec = RequestRecord(
        request_id="r", start=0.0, end=1.0, first_token=0.1, first_answer=0.5,
        reasoning_tokens=4, output_tokens=9, chunk_times=[0.1, 0.3, 0.5, 0.7, 0.9],
        chunk_tokens=[2, 2, 2, 2, 1],
    )  # fmt: skip
    plain = RequestRecord(request_id="p", start=0.0, end=1.0, first_token=0.2, output_tokens=5)
    figures = reasoning_figures([rec, plain])
    assert figures is not None and figures["requests"] == 1
    assert figures["ttft_reasoning_ms"]["p50"] == pytest.approx(100.0)
    assert figures["ttft_answer_ms"]["p50"] == pytest.approx(500.0)
    assert figures["itl_reasoning_ms"]["p50"] == pytest.approx(100.0)  # 0.4 s over 4 tokens
    assert figures["itl_answer_ms"]["p50"] == pytest.approx(100.0)  # 0.4 s over 5 - 1 tokens
    assert reasoning_figures([plain]) is None


def test_the_answer_is_found_by_the_delta_field_not_by_order() -> None:
    rec = RequestRecord(request_id="r")
    handler = OpenAIHandler(rec, None, chat=True)

    def chunk(delta: dict[str, str], done: int) -> dict[str, object]:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                "usage": {"prompt_tokens": 3, "completion_tokens": done}}  # fmt: skip

    handler.handle(chunk({"role": "assistant", "content": ""}, 0), 1.0)
    handler.handle(chunk({"reasoning_content": "ab"}, 2), 1.1)
    handler.handle(chunk({"reasoning": "cd"}, 4), 1.2)
    assert handler.handle_fast(json.dumps(chunk({"content": "x"}, 5)).encode(), 1.3) is False
    handler.handle(chunk({"content": "x"}, 5), 1.3)
    handler.finish()
    assert (rec.reasoning_tokens, rec.first_answer, rec.first_token) == (4, 1.3, 1.1)
