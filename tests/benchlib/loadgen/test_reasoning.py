"""Reasoning streams: the simulator in reasoning mode streams a chat request's first tokens as
reasoning (vLLM 0.32's `delta.reasoning`, SGLang's `delta.reasoning_content`) and the rest as the
answer; the load generator's time to the first reasoning token and to the first answer token,
and its per-phase token gaps, are checked against the simulator's truth log."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchlib.loadgen.apis import Api, OpenAIHandler
from benchlib.loadgen.level import run_level
from benchlib.loadgen.level_config import LevelConfig
from benchlib.loadgen.prompts import SyntheticPrompts
from benchlib.loadgen.reasoning import reasoning_figures
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.summary import PhaseAcceptance, ReasoningFigures
from benchlib.loadgen.wire import ChoiceDelta, OpenAIStreamChunk
from benchlib.simulator.encode import StreamEncoder
from benchlib.simulator.profiles import PROFILES
from benchlib.simulator.protocol import GenRequest
from tests.benchlib.loadgen.test_simulator import truth_of
from tests.fixtures.ports import free_port

ROOT = Path(__file__).resolve().parents[3]
REASONING = 25  # not a multiple of eagle3's tokens per step: some steps cross the boundary
MAX_TOKENS = 60
LONG_REASONING, LONG_MAX_TOKENS = 200, 300
DRAFTS = PROFILES["eagle3"].spec_steps  # a verify step emits 1 to DRAFTS + 1 tokens


@contextlib.contextmanager
def _simulator(tmp: Path, style: str, reasoning: int) -> Iterator[tuple[str, Path, str]]:
    """The simulator in reasoning mode (eagle3: several tokens a step), in `style`'s shape."""
    truth = tmp / "truth.jsonl"
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1", "--port", str(port),
         "--profile", "eagle3", "--t0-ms", "2", "--k-ms", "0", "--seed", "3",
         "--metrics-style", style, "--reasoning-tokens", str(reasoning),
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
    try:
        yield url, truth, style
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def reasoning_simulator(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path, str]]:
    style = str(request.param)
    with _simulator(tmp_path_factory.mktemp(f"reasoning-{style}"), style, REASONING) as sim:
        yield sim


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def long_reasoning_simulator(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path, str]]:
    """Reasoning long against a step (LONG_REASONING tokens): the step that crosses into the
    answer is then a small part of either phase."""
    style = str(request.param)
    with _simulator(tmp_path_factory.mktemp(f"long-{style}"), style, LONG_REASONING) as sim:
        yield sim


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
    answer_p50, reasoning_p50 = (
        figures["ttft_answer_ms"]["p50"],
        figures["ttft_reasoning_ms"]["p50"],
    )
    assert answer_p50 is not None and reasoning_p50 is not None and answer_p50 > reasoning_p50
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

    def chunk(delta: ChoiceDelta, done: int) -> OpenAIStreamChunk:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                "usage": {"prompt_tokens": 3, "completion_tokens": done}}  # fmt: skip

    handler.handle(chunk({"role": "assistant", "content": ""}, 0), 1.0)
    handler.handle(chunk({"reasoning_content": "ab"}, 2), 1.1)
    handler.handle(chunk({"reasoning": "cd"}, 4), 1.2)
    assert handler.handle_fast(json.dumps(chunk({"content": "x"}, 5)).encode(), 1.3) is False
    handler.handle(chunk({"content": "x"}, 5), 1.3)
    handler.finish()
    assert (rec.reasoning_tokens, rec.first_answer, rec.first_token) == (4, 1.3, 1.1)


def _sent_per_phase(row: dict[str, Any]) -> tuple[int, int, int, int]:
    """(reasoning tokens, chunks, answer tokens, chunks) a client reads from what the truth
    log says the server sent: each send holding both phases is two events (the reasoning's
    first), and the first send (the prefill's token) is left out of the reasoning."""
    reasoning, sent = row["reasoning_tokens"], 0
    out = [0, 0, 0, 0]
    for i, (_, n) in enumerate(row["chunks"]):
        r = min(n, max(0, reasoning - sent))
        if r and i:
            out[0] += r
            out[1] += 1
        if n > r:
            out[2] += n - r
            out[3] += 1
        sent += n
    return out[0], out[1], out[2], out[3]


async def test_tokens_per_chunk_per_phase_read_each_phases_accept_length_from_the_truth_log(
    long_reasoning_simulator: tuple[str, Path, str],
) -> None:
    url, truth_path, style = long_reasoning_simulator
    cfg = LevelConfig(
        api=Api.CHAT, base_url=url, model="specdash-sim", concurrency=4, num_requests=16,
        max_tokens=LONG_MAX_TOKENS, ignore_eos=True, run_id=f"phase-accept-{style}",
    )  # fmt: skip
    result = await run_level(cfg, SyntheticPrompts(20, seed=7))
    assert result.status == "completed"
    truth = await truth_of(truth_path, result.records)
    figures = reasoning_figures(result.records)
    assert figures is not None
    reasoning, answer = figures["accept_reasoning"], figures["accept_answer"]
    read_reasoning, read_answer = reasoning["tokens_per_chunk"], answer["tokens_per_chunk"]
    assert read_reasoning is not None and read_answer is not None
    n = len(result.records)
    assert reasoning["requests"] == answer["requests"] == n

    # What the server sent, read back exactly: the figure is the stream's chunking.
    sent = [_sent_per_phase(truth[rec.request_id]) for rec in result.records]
    assert (reasoning["tokens"], reasoning["chunks"], answer["tokens"], answer["chunks"]) == tuple(
        sum(s[i] for s in sent) for i in range(4)
    )
    assert reasoning["tokens"] + answer["tokens"] == n * (LONG_MAX_TOKENS - 1)

    # Against the engine's truth per phase: verify steps and the tokens they made. The chunking
    # moves it only at the boundary and where the server sent several steps at once: the step
    # crossing into the answer gives the reasoning its first tokens (its last up to DRAFTS go
    # to the answer, with one more answer chunk, at most one per request), and `merged` steps
    # went out with another (the truth log's sends against its steps; 0 on a quiet machine).
    rows = [truth[rec.request_id] for rec in result.records]
    t_r = sum(row["reasoning_step_tokens"] for row in rows)
    s_r = sum(row["reasoning_verify_steps"] for row in rows)
    t_a = sum(row["answer_step_tokens"] for row in rows)
    s_a = sum(row["answer_verify_steps"] for row in rows)
    merged = sum(row["spec_verify_steps"] + 1 - len(row["chunks"]) for row in rows)
    assert s_r + s_a == sum(row["spec_verify_steps"] for row in rows)
    # The figures docs/measurement.md quotes (`-s` shows them).
    print(
        f"{style}: reasoning {read_reasoning:.3f} ({reasoning['tokens']} tokens / "
        f"{reasoning['chunks']} chunks), truth {t_r / s_r:.3f} ({t_r} / {s_r} verify steps); "
        f"answer {read_answer:.3f} ({answer['tokens']} / {answer['chunks']}), truth "
        f"{t_a / s_a:.3f} ({t_a} / {s_a}); sent together: {merged}"
    )
    assert (t_r - DRAFTS * n) / s_r <= read_reasoning <= t_r / (s_r - merged)
    assert t_a / (s_a + n) <= read_answer <= (t_a + DRAFTS * n) / (s_a - merged)

    # The two phases differ as configured: each reads nearer its own accept length than the
    # other's (half the configured gap; ~1,000 and ~600 steps: standard errors under 0.05).
    profile = PROFILES["eagle3"]
    assert profile.reasoning_accept_length is not None
    half_gap = (profile.reasoning_accept_length - profile.accept_length) / 2
    assert half_gap > 0.2
    assert read_reasoning == pytest.approx(profile.reasoning_accept_length, abs=half_gap)
    assert read_answer == pytest.approx(profile.accept_length, abs=half_gap)


def test_tokens_per_chunk_per_phase_leave_out_the_prefill_chunk_and_estimated_counts() -> None:
    # 1 prefill token, reasoning steps of 3 and 2 (the 2 ends the reasoning: 6 tokens), then
    # answer steps of 2, 2 and 1.
    rec = RequestRecord(
        request_id="r", start=0.0, end=1.0, first_token=0.1, first_answer=0.4,
        reasoning_tokens=6, output_tokens=11, chunk_times=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6],
        chunk_tokens=[1, 3, 2, 2, 2, 1],
    )  # fmt: skip
    # Ended while still reasoning: every chunk is the reasoning's, no answer phase.
    unanswered = RequestRecord(
        request_id="u", start=0.0, end=1.0, first_token=0.1, reasoning_tokens=5,
        output_tokens=5, chunk_times=[0.1, 0.2], chunk_tokens=[1, 4],
    )  # fmt: skip
    # One token per chunk by assumption (no per-chunk usage): read as 1.0 it would say nothing.
    estimated = RequestRecord(
        request_id="e", start=0.0, end=1.0, first_token=0.1, first_answer=0.3,
        reasoning_tokens=2, output_tokens=4, chunk_times=[0.1, 0.2, 0.3, 0.4],
        chunk_tokens=[1, 1, 1, 1], chunk_tokens_estimated=True,
    )  # fmt: skip
    figures = reasoning_figures([rec, unanswered, estimated])
    assert figures is not None
    # Chunks 100 ms apart: every chunk is its own delivery.
    assert figures["accept_reasoning"] == {
        "tokens_per_chunk": (5 + 4) / 3, "tokens_per_delivery": (5 + 4) / 3,
        "tokens": 9, "chunks": 3, "deliveries": 3, "requests": 2,
    }  # fmt: skip
    assert figures["accept_answer"] == {
        "tokens_per_chunk": 5 / 3, "tokens_per_delivery": 5 / 3,
        "tokens": 5, "chunks": 3, "deliveries": 3, "requests": 1,
    }  # fmt: skip
    # A record stored before these figures were kept reads back with everything they need.
    anchor = ClockAnchor(t0_wall=1.7e9, t0_perf=0.0)
    again = RequestRecord.from_json(rec.to_json(anchor, level_index=0), anchor)
    # The figures have exactly the declared shape.
    assert set(figures) == set(ReasoningFigures.__required_keys__)
    assert set(figures["accept_answer"]) == set(PhaseAcceptance.__required_keys__)
    original, read_back = reasoning_figures([rec]), reasoning_figures([again])
    assert original is not None and read_back is not None
    assert read_back["accept_reasoning"] == original["accept_reasoning"]
    assert read_back["accept_answer"] == original["accept_answer"]


def test_an_event_carrying_the_last_reasoning_and_the_first_answer_starts_the_answer() -> None:
    # vLLM's reasoning parsers return one delta with both fields when a step's tokens cross the
    # end of the reasoning (vllm/reasoning/deepseek_r1_reasoning_parser.py): its answer token
    # arrived with it, so the time to the first answer token is that event's, not the next's.
    rec = RequestRecord(request_id="r")
    handler = OpenAIHandler(rec, None, chat=True)

    def chunk(delta: ChoiceDelta, done: int) -> OpenAIStreamChunk:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                "usage": {"prompt_tokens": 3, "completion_tokens": done}}  # fmt: skip

    handler.handle(chunk({"reasoning": "a"}, 1), 1.0)
    handler.handle(chunk({"reasoning": "bcd"}, 4), 1.1)
    handler.handle(chunk({"reasoning": "e", "content": "XY"}, 7), 1.2)
    handler.handle(chunk({"content": "ZW"}, 9), 1.3)
    handler.finish()
    assert (rec.reasoning_tokens, rec.first_answer) == (4, 1.2)
    rec.start, rec.end = 0.9, 1.4
    figures = reasoning_figures([rec])
    assert figures is not None
    assert figures["ttft_answer_ms"]["p50"] == pytest.approx(300.0)
    assert figures["accept_reasoning"]["tokens_per_chunk"] == 3.0  # the prefill's chunk left out
    assert figures["accept_answer"]["tokens_per_chunk"] == 2.5  # (3 + 2) / 2


def test_token_by_token_streams_read_one_per_chunk_and_a_step_per_delivery() -> None:
    # llama-server's shape (docs/engines.md): each token of a verify step its own SSE event,
    # tens of microseconds apart, the steps 20 ms apart. The prefill's token, then reasoning
    # steps of 3 tokens (the last one crossing: 2 reasoning, 1 answer), then answer steps of 2.
    times: list[float] = [0.1]
    tokens: list[int] = [1]
    step_at = 0.1
    for size in (3, 3, 3, 2 + 1, 2, 2):
        step_at += 0.02
        times += [step_at + 50e-6 * j for j in range(size)]
        tokens += [1] * size
    rec = RequestRecord(
        request_id="l", start=0.0, end=times[-1], first_token=0.1, first_answer=times[12],
        reasoning_tokens=12, output_tokens=len(tokens), chunk_times=times, chunk_tokens=tokens,
    )  # fmt: skip
    figures = reasoning_figures([rec])
    assert figures is not None
    reasoning, answer = figures["accept_reasoning"], figures["accept_answer"]
    assert reasoning["tokens_per_chunk"] == answer["tokens_per_chunk"] == 1.0
    # The reasoning's deliveries: 3, 3, 3 and the crossing step's 2; the answer's 1, 2 and 2.
    assert (reasoning["tokens"], reasoning["deliveries"]) == (11, 4)
    assert (answer["tokens"], answer["deliveries"]) == (5, 3)
