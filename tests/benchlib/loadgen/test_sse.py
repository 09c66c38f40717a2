from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from benchlib.loadgen.apis import Api
from benchlib.loadgen.client import send_request
from benchlib.loadgen.health import LiveStats
from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.sse import SSEDecoder

STREAM = (
    b": keep-alive comment\n\n"
    b'data: {"a": 1}\n\n'
    b"event: message\r\n"
    b'data: {"b": 2}\r\n\r\n'
    b"id: 7\n"
    b'data: {"c":\n'
    b"data: 3}\n\n"
    b"retry: 100\n\n"
    b"data:[DONE]\n\n"
)
EXPECTED = [b'{"a": 1}', b'{"b": 2}', b'{"c":\n3}', b"[DONE]"]


def decode_in_pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    dec = SSEDecoder()
    out: list[bytes] = []
    prev = 0
    for cut in [*cuts, len(data)]:
        out.extend(dec.feed(data[prev:cut]))
        prev = cut
    return out + dec.flush()


def test_every_single_split_point_gives_the_same_events():
    for cut in range(len(STREAM) + 1):
        assert decode_in_pieces(STREAM, [cut]) == EXPECTED, cut


def test_byte_by_byte_feeding_gives_the_same_events():
    assert decode_in_pieces(STREAM, list(range(1, len(STREAM)))) == EXPECTED


def test_unterminated_last_event_is_flushed_at_end_of_stream():
    dec = SSEDecoder()
    assert dec.feed(b'data: {"x": 1}\n\ndata: {"y": 2}') == [b'{"x": 1}']
    assert dec.flush() == [b'{"y": 2}']


def sse(*objs: object) -> bytes:
    return b"".join(
        b"data: " + (o if isinstance(o, bytes) else json.dumps(o).encode()) + b"\n\n" for o in objs
    )


def pieces_of(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


async def run_stream(
    pieces: list[bytes], api: Api = Api.COMPLETIONS, status: int = 200
) -> tuple[RequestRecord, httpx.Request]:
    seen: list[httpx.Request] = []

    async def body() -> AsyncIterator[bytes]:
        for p in pieces:
            yield p

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, content=body())

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        rec = RequestRecord(request_id="rid-1")
        live = LiveStats()
        await send_request(
            client, api=api, url="http://test/v1/completions", content=b"{}", rec=rec, live=live
        )
        if rec.ok:
            assert live.tokens == sum(rec.chunk_tokens)
    return rec, seen[0]


def completion(text: str, total: int | None, finish: str | None = None) -> dict[str, object]:
    obj: dict[str, object] = {"choices": [{"index": 0, "text": text, "finish_reason": finish}]}
    if total is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": total}
    return obj


CONTINUOUS = sse(
    completion("Hello", 1),
    completion(" big chunk", 4),  # speculative: 3 tokens in one chunk
    completion("", 4),  # no new token
    completion(" end", 6, "length"),
    {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 6}},
    b"[DONE]",
)


@pytest.mark.parametrize("size", [1, 3, 7, 64, 10_000])
async def test_per_chunk_usage_gives_exact_token_counts_at_any_read_size(size):
    rec, _ = await run_stream(pieces_of(CONTINUOUS, size))
    assert rec.ok, rec.error
    assert rec.chunk_tokens == [1, 3, 2]
    assert rec.output_tokens == 6
    assert rec.prompt_tokens == 5
    assert rec.finish_reason == "length"
    assert not rec.chunk_tokens_estimated
    assert not rec.output_tokens_estimated
    assert rec.first_token == rec.chunk_times[0]
    assert rec.start <= rec.chunk_times[0] <= rec.chunk_times[-1] <= rec.end


async def test_request_carries_x_request_id_header():
    _, request = await run_stream([CONTINUOUS])
    assert request.headers["x-request-id"] == "rid-1"


async def test_usage_only_in_final_chunk_flags_chunk_counts_as_estimated():
    data = sse(
        completion("a", None),
        completion("bcd", None),
        completion("e", None, "stop"),
        {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7}},
        b"[DONE]",
    )
    rec, _ = await run_stream(pieces_of(data, 5))
    assert rec.ok
    assert rec.chunk_tokens == [1, 1, 1]
    assert rec.chunk_tokens_estimated
    assert rec.output_tokens == 7  # the server's count, not the chunk count
    assert not rec.output_tokens_estimated


async def test_no_usage_at_all_estimates_output_tokens_and_says_so():
    data = sse(completion("a", None), completion("b", None, "length"), b"[DONE]")
    rec, _ = await run_stream([data])
    assert rec.ok
    assert rec.output_tokens == 2
    assert rec.output_tokens_estimated and rec.chunk_tokens_estimated


async def test_chat_role_only_delta_is_not_a_token():
    role: dict[str, Any] = {
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]
    }
    role["usage"] = {"prompt_tokens": 5, "completion_tokens": 0}
    first = {
        "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2},
    }
    rec, _ = await run_stream([sse(role, first, b"[DONE]")], api=Api.CHAT)
    assert rec.ok
    assert rec.chunk_tokens == [2]
    assert rec.finish_reason == "stop"


async def test_error_payload_in_stream_is_a_server_error():
    data = sse(completion("a", 1), {"error": {"message": "out of memory", "code": 500}}, b"[DONE]")
    rec, _ = await run_stream([data])
    assert rec.error_kind == "server_error"
    assert "out of memory" in (rec.error or "")


async def test_stream_cut_before_done_is_a_protocol_error():
    rec, _ = await run_stream([sse(completion("a", 1), completion("b", 2))])
    assert rec.error_kind == "protocol"
    assert rec.chunk_tokens == [1, 1]


async def test_malformed_json_is_a_protocol_error_not_an_exception():
    rec, _ = await run_stream([b"data: {not json\n\n"])
    assert rec.error_kind == "protocol"


async def test_http_error_status_is_recorded_with_message():
    rec, _ = await run_stream([b'{"error": {"message": "model not found"}}'], status=404)
    assert rec.error_kind == "http_404"
    assert rec.error == "model not found"


async def test_sglang_generate_uses_cumulative_meta_info():
    data = sse(
        {"text": "a", "meta_info": {"completion_tokens": 1, "prompt_tokens": 9}},
        {"text": "abcd", "meta_info": {"completion_tokens": 4, "prompt_tokens": 9}},
        {
            "text": "abcde",
            "meta_info": {"completion_tokens": 5, "finish_reason": {"type": "length"}},
        },
        b"[DONE]",
    )
    rec, _ = await run_stream(pieces_of(data, 11), api=Api.GENERATE)
    assert rec.ok
    assert rec.chunk_tokens == [1, 3, 1]
    assert rec.output_tokens == 5
    assert rec.prompt_tokens == 9
    assert rec.finish_reason == "length"


async def test_connection_refused_is_a_connect_error():
    async with httpx.AsyncClient() as client:
        rec = RequestRecord(request_id="x")
        # port 9 on loopback: nothing listens there
        await send_request(
            client,
            api=Api.COMPLETIONS,
            url="http://127.0.0.1:9/v1/completions",
            content=b"{}",
            rec=rec,
        )
    assert rec.error_kind == "connect"
    assert rec.end >= rec.start


async def test_send_path_is_stamped_between_start_and_first_token(stub):
    async with httpx.AsyncClient() as client:
        rec = RequestRecord(request_id="stamps")
        await send_request(
            client,
            api=Api.COMPLETIONS,
            url=stub.base_url + "/v1/completions",
            content=b'{"max_tokens": 3}',
            rec=rec,
        )
    assert rec.ok, rec.error
    assert rec.sent is not None and rec.written is not None
    assert rec.first_token is not None
    assert rec.start <= rec.sent <= rec.written <= rec.first_token
