"""Per-request speculative acceptance parsed from the engines' own response shapes.

The llama.cpp fixture (data/llamacpp_chat_stream_spec.sse) follows llama-server's streamed
/v1/chat/completions as of build b9251 (llama.cpp tools/server: one event per token, a finish
chunk, then a `choices: []` chunk with `usage` and `timings`, where result_timings::to_json adds
`draft_n` / `draft_n_accepted` when the request drafted); the token values are made up. The
SGLang shape follows `meta_info` of a finished speculative request on `/generate` (SGLang 0.5.x:
spec_verify_ct, spec_num_proposed_drafts, spec_num_correct_drafts), and on the OpenAI endpoints
the extra `choices: []` chunk with `sglext.spec_tokens_details` that SGLang 0.5.23 sends for a
request setting `return_spec_tokens_details: true` (docs/engines.md, "SGLang"; the simulator's
SGLang mode encodes that shape, and these tests replay it).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from benchlib.loadgen.acceptance import level_acceptance
from benchlib.loadgen.apis import Api, build_body, engine_extra_body
from benchlib.loadgen.client import send_request
from benchlib.loadgen.records import ClockAnchor, RequestRecord
from benchlib.loadgen.wire import SpecTokensDetails
from benchlib.simulator.app import SimApp
from benchlib.simulator.config import SimConfig
from benchlib.simulator.encode import StreamEncoder
from benchlib.simulator.profiles import PROFILES
from benchlib.simulator.protocol import GenRequest
from tests.benchlib.loadgen.conftest import make_record
from tests.fixtures.replay import replay

FIXTURE = Path(__file__).parent / "data" / "llamacpp_chat_stream_spec.sse"


async def _replay(api: Api, body: bytes, path: str) -> tuple[RequestRecord, bytes]:
    replayed = await replay(api, body, path=path, category="code")
    return replayed.record, replayed.request_head


async def test_llamacpp_stream_timings_give_the_requests_drafts_and_acceptance() -> None:
    rec, request = await _replay(Api.CHAT, FIXTURE.read_bytes(), "/v1/chat/completions")
    assert rec.ok, rec.error
    assert rec.output_tokens == 6
    assert (rec.spec_drafted, rec.spec_accepted) == (6, 4)
    # 6 tokens: the first from the prompt, then 4 accepted drafts + 1 token per verify step:
    # 1 step (the real server's counters agree: tests/engines/test_llamacpp_recorded.py)
    assert rec.spec_steps == 1
    assert b"\r\nx-specdash-category: code\r\n" in request.lower()


async def test_a_llamacpp_stream_without_drafting_has_no_spec_figures() -> None:
    text = FIXTURE.read_text().replace(',"draft_n":6,"draft_n_accepted":4', "")
    rec, _ = await _replay(Api.CHAT, text.encode(), "/v1/chat/completions")
    assert rec.ok
    assert (rec.spec_steps, rec.spec_drafted, rec.spec_accepted) == (None, None, None)


async def test_sglang_generate_meta_info_gives_verify_steps_and_drafts() -> None:
    def event(n: int, final: bool) -> str:
        meta: dict[str, object] = {"id": "x", "prompt_tokens": 9, "completion_tokens": n}
        meta["finish_reason"] = {"type": "length", "length": n} if final else None
        if final:
            meta |= {
                "spec_verify_ct": 4,
                "spec_accept_length": 3.0,
                "spec_accept_rate": 0.667,
                "spec_num_correct_drafts": 8,
                "spec_num_proposed_drafts": 12,
            }
        return "data: " + json.dumps({"text": "t" * n, "meta_info": meta}) + "\n\n"

    body = (event(3, False) + event(7, False) + event(12, True) + "data: [DONE]\n\n").encode()
    rec, _ = await _replay(Api.GENERATE, body, "/generate")
    assert rec.ok, rec.error
    assert rec.output_tokens == 12
    assert (rec.spec_steps, rec.spec_drafted, rec.spec_accepted) == (4, 12, 8)


def test_records_keep_category_and_spec_figures_through_json() -> None:
    anchor = ClockAnchor(t0_wall=1_767_225_600.0, t0_perf=100.0)
    rec = make_record("a", 100.0, [(100.5, 1), (101.0, 3)])
    rec.category, rec.spec_steps, rec.spec_drafted, rec.spec_accepted = "chat", 2, 6, 2
    back = RequestRecord.from_json(rec.to_json(anchor, level_index=0), anchor)
    assert (back.category, back.spec_steps, back.spec_drafted, back.spec_accepted) == (
        "chat",
        2,
        6,
        2,
    )


def test_level_acceptance_sums_before_dividing_and_splits_by_category() -> None:
    def rec(rid: str, cat: str, out: int, steps: int, drafted: int, accepted: int) -> RequestRecord:
        r = make_record(rid, 0.0, [(0.5, out)])
        r.category, r.spec_steps, r.spec_drafted, r.spec_accepted = cat, steps, drafted, accepted
        return r

    records = [
        rec("c1", "chat", 30, 10, 30, 20),  # 3.0 tokens a step
        rec("c2", "chat", 10, 5, 15, 5),  # 2.0
        rec("k1", "code", 20, 10, 30, 10),  # 2.0
        make_record("f", 0.0, [(0.5, 1)], error_kind="timeout"),
    ]
    got = level_acceptance(records)
    assert got["accept_length"] == 60 / 25
    assert got["acceptance_rate"] == 35 / 75
    assert got["by_category"]["chat"]["accept_length"] == 40 / 15
    assert got["by_category"]["code"]["accept_length"] == 2.0
    assert got["by_category"]["code"]["acceptance_rate"] == 10 / 30
    assert got["requests"] == 3  # the failed request is not counted


def _sglang_openai_stream(details: SpecTokensDetails | None) -> bytes:
    """An SGLang 0.5.23-shaped /v1/completions stream of 9 tokens in chunks of 1, 4, 4, with
    usage on every chunk, the sglext chunk (when given), the usage chunk and [DONE]."""
    req = GenRequest("completions", "m", 5, 9, True, True, True, True, spec_details=True)
    enc = StreamEncoder(req, "r1", 1_767_225_600, sglang=True)
    parts = [enc.chunk(0, 1, None), enc.chunk(1, 4, None), enc.chunk(5, 4, "length")]
    if details is not None:
        parts.append(enc.sglext_chunk(details))
    return b"".join([*parts, enc.usage_chunk(9), b"data: [DONE]\n\n"])


async def test_sglang_openai_sglext_chunk_gives_verify_steps_and_drafts() -> None:
    details: SpecTokensDetails = {
        "spec_verify_ct": 2,
        "spec_accept_length": 4.5,
        "spec_accept_rate": 1.0,
        "spec_num_correct_drafts": 6,
        "spec_num_proposed_drafts": 6,
    }
    rec, _ = await _replay(Api.COMPLETIONS, _sglang_openai_stream(details), "/v1/completions")
    assert rec.ok, rec.error
    assert (rec.output_tokens, rec.chunk_tokens) == (9, [1, 4, 4])
    assert (rec.spec_steps, rec.spec_drafted, rec.spec_accepted) == (2, 6, 6)
    assert level_acceptance([rec])["accept_length"] == 9 / 2


async def test_an_openai_stream_without_sglext_has_no_spec_figures() -> None:
    rec, _ = await _replay(Api.COMPLETIONS, _sglang_openai_stream(None), "/v1/completions")
    assert rec.ok and rec.output_tokens == 9
    assert (rec.spec_steps, rec.spec_drafted, rec.spec_accepted) == (None, None, None)


def test_spec_details_are_asked_of_sglang_on_the_openai_apis_only() -> None:
    asked = {"return_spec_tokens_details": True}
    assert engine_extra_body("sglang", Api.COMPLETIONS) == asked
    assert engine_extra_body("sglang", Api.CHAT) == asked
    assert engine_extra_body("simulator", Api.CHAT) == asked
    # /generate reports them in meta_info unasked; vLLM warns on every unknown field.
    assert engine_extra_body("sglang", Api.GENERATE) == {}
    assert engine_extra_body("vllm", Api.COMPLETIONS) == {}
    assert engine_extra_body("llamacpp", Api.CHAT) == {}


async def test_load_generator_reads_per_request_acceptance_from_the_simulators_openai_api() -> None:
    # The SGLang-mode simulator in process: the request asks as the load generator does for an
    # SGLang profile, and the record gets the request's own verify steps and drafts.
    profile = PROFILES["eagle3"].replace(t0_ms=0.05, k_ms=0.0)
    app = SimApp(SimConfig(profile=profile))
    body = build_body(
        Api.CHAT,
        model="specdash-sim",
        prompt="hello",
        max_tokens=80,
        ignore_eos=True,
        extra=engine_extra_body("sglang", Api.CHAT),
    )
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport) as client:
        rec = RequestRecord(request_id="e2e")
        await send_request(
            client,
            api=Api.CHAT,
            url="http://sim/v1/chat/completions",
            content=json.dumps(body).encode(),
            rec=rec,
        )
    assert rec.ok, rec.error
    assert rec.output_tokens == 80
    assert rec.spec_steps is not None and 79 / 4 <= rec.spec_steps < 79
    assert rec.spec_drafted == 3 * rec.spec_steps
    assert rec.spec_accepted == 79 - rec.spec_steps
    assert len(rec.chunk_tokens) == rec.spec_steps + 1  # one chunk per step, prefill's first
