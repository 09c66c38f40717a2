"""Per-request speculative acceptance parsed from the engines' own response shapes.

The llama.cpp fixture (data/llamacpp_chat_stream_spec.sse) follows llama-server's streamed
/v1/chat/completions as of build b9251 (llama.cpp tools/server: one event per token, a finish
chunk, then a `choices: []` chunk with `usage` and `timings`, where result_timings::to_json adds
`draft_n` / `draft_n_accepted` when the request drafted); the token values are made up. The
SGLang shape follows `meta_info` of a finished speculative request on `/generate` (SGLang 0.5.x:
spec_verify_ct, spec_num_proposed_drafts, spec_num_correct_drafts).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx

from benchmarks.loadgen.acceptance import level_acceptance
from benchmarks.loadgen.apis import Api
from benchmarks.loadgen.client import send_request
from benchmarks.loadgen.records import ClockAnchor, RequestRecord
from tests.loadgen.conftest import make_record

FIXTURE = Path(__file__).parent / "data" / "llamacpp_chat_stream_spec.sse"


class _Chunks(httpx.AsyncByteStream):
    """The body as the server streamed it: one read per SSE event."""

    def __init__(self, body: bytes) -> None:
        self.events = [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for event in self.events:
            yield event


async def _replay(api: Api, body: bytes, path: str) -> tuple[RequestRecord, httpx.Request]:
    seen: list[httpx.Request] = []

    def reply(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200, stream=_Chunks(body), headers={"content-type": "text/event-stream"}
        )

    async with httpx.AsyncClient(transport=httpx.MockTransport(reply)) as client:
        rec = RequestRecord(request_id="r1", category="code")
        await send_request(client, api=api, url=f"http://127.0.0.1:1{path}", content=b"{}", rec=rec)
    return rec, seen[0]


async def test_llamacpp_stream_timings_give_the_requests_drafts_and_acceptance() -> None:
    rec, request = await _replay(Api.CHAT, FIXTURE.read_bytes(), "/v1/chat/completions")
    assert rec.ok, rec.error
    assert rec.output_tokens == 6
    assert (rec.spec_drafted, rec.spec_accepted) == (6, 4)
    # 6 tokens: the first from the prompt, then 4 accepted drafts + 1 token per verify step:
    # 1 step (the real server's counters agree: tests/engines/test_llamacpp_recorded.py)
    assert rec.spec_steps == 1
    assert request.headers["x-specdash-category"] == "code"


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
