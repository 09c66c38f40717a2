from __future__ import annotations

import json

import pytest

from benchlib.loadgen.apis import OpenAIHandler, usage_counts
from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.sse import SSEDecoder
from benchlib.simulator.encode import StreamEncoder
from benchlib.simulator.protocol import GenRequest


def _encoder(kind: str) -> StreamEncoder:
    req = GenRequest(
        kind=kind,  # type: ignore[arg-type]
        model="specdash-sim",
        prompt_tokens=17,
        max_tokens=9,
        stream=True,
        ignore_eos=True,
        include_usage=True,
        continuous_usage=True,
    )
    return StreamEncoder(req, "req-1", 1_767_225_600)


def simulator_payloads(kind: str) -> list[bytes]:
    """The data payloads of one streamed response exactly as the simulator encodes it:
    chunks of 1, 3, 2 and 3 tokens (the last with its finish reason), then the usage tail."""
    enc = _encoder(kind)
    wire = b"".join(
        [
            enc.chunk(0, 1, None),
            enc.chunk(1, 3, None),
            enc.chunk(4, 2, None),
            enc.chunk(6, 3, "length"),
            enc.usage_chunk(9),
        ]
    )
    return SSEDecoder().feed(wire)


def _fast_then_slow(payloads: list[bytes], chat: bool) -> tuple[RequestRecord, list[bool]]:
    rec = RequestRecord(request_id="fast")
    h = OpenAIHandler(rec, None, chat=chat)
    taken = []
    for i, p in enumerate(payloads):
        fast = h.handle_fast(p, float(i))
        taken.append(fast)
        if not fast:
            h.handle(json.loads(p), float(i))
    h.finish()
    return rec, taken


def _slow_only(payloads: list[bytes], chat: bool) -> RequestRecord:
    rec = RequestRecord(request_id="fast")
    h = OpenAIHandler(rec, None, chat=chat)
    for i, p in enumerate(payloads):
        h.handle(json.loads(p), float(i))
    h.finish()
    return rec


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_simulator_chunks_in_mid_stream_take_the_fast_path_with_the_same_record(kind):
    payloads = simulator_payloads(kind)
    rec, taken = _fast_then_slow(payloads, chat=kind == "chat")
    # the three mid-stream chunks skip the JSON decode; the finishing chunk and the tail do not
    assert taken == [True, True, True, False, False]
    assert rec == _slow_only(payloads, chat=kind == "chat")
    assert rec.chunk_tokens == [1, 3, 2, 3]
    assert rec.chunk_times == [0.0, 1.0, 2.0, 3.0]
    assert rec.output_tokens == 9
    assert rec.prompt_tokens == 17
    assert rec.finish_reason == "length"


def _chunk(usage: str, *, choices: str = '[{"index":0,"text":"ab","finish_reason":null}]') -> bytes:
    return b'{"id":"x","choices":%s,"usage":%s}' % (choices.encode(), usage.encode())


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (_chunk('{"prompt_tokens":3,"completion_tokens":2,"details":{"cached":1}}'), "nested"),
        (_chunk('{"prompt_tokens":3,"completion_tokens":2.0}'), "float"),
        (_chunk('{"prompt_tokens": 3, "completion_tokens": 2}'), "spaces"),
        (_chunk('{"completion_tokens":2}', choices="[]"), "usage-only tail"),
        (
            _chunk(
                '{"completion_tokens":2}',
                choices='[{"index":0,"text":"a","finish_reason":null},'
                '{"index":1,"text":"b","finish_reason":null}]',
            ),
            "two choices",
        ),
        (
            _chunk(
                '{"completion_tokens":2}',
                choices='[{"index":0,"text":"a","finish_reason":"stop"}]',
            ),
            "finishing chunk",
        ),
        (b'{"id":"x","choices":[{"index":0,"text":"a","finish_reason":null}]}', "no usage"),
        (b'{"error":{"message":"boom"},"usage":{"completion_tokens":2}}', "error"),
        (
            b'{"choices":[{"index":0,"text":"a","finish_reason":null,'
            b'"usage":{"completion_tokens":2}}]}',
            "usage inside the choice",
        ),
        (
            b'{"choices":[{"index":0,"finish_reason":null}],"usage":{"completion_tokens":2},'
            b'"x":{"n":1}}',
            "usage not the last member",
        ),
    ],
)
def test_unusual_chunks_fall_back_to_the_json_decode(payload, why):
    json.loads(payload)  # each is valid JSON: only the shape is unusual
    rec, taken = _fast_then_slow([payload], chat=False)
    assert taken == [False], why
    assert rec == _slow_only([payload], chat=False)


def test_model_text_that_looks_like_usage_cannot_fool_the_fast_path():
    # JSON escapes the quotes of a string, so text that spells out a usage object is inert
    text = '","usage":{"completion_tokens":999}}'
    obj = {
        "choices": [{"index": 0, "text": text, "finish_reason": None}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    payload = json.dumps(obj, separators=(",", ":")).encode()
    rec, taken = _fast_then_slow([payload], chat=False)
    assert taken == [True]
    assert rec.chunk_tokens == [2]
    assert rec.output_tokens == 2
    assert usage_counts(payload) == (2, 3)


def test_a_tail_chunk_ending_like_usage_in_text_is_not_taken_for_usage():
    text = ',"usage":{"completion_tokens":7}}'
    obj = {"choices": [{"index": 0, "text": text, "finish_reason": None}]}
    payload = json.dumps(obj, separators=(",", ":")).encode()
    assert usage_counts(payload) is None
    rec, taken = _fast_then_slow([payload], chat=False)
    assert taken == [False]
    assert rec.chunk_tokens == [1]  # no usage: one estimated token for the text
    assert rec.chunk_tokens_estimated


def test_usage_without_a_completion_count_is_left_to_the_json_path():
    # (where `handle` rejects it as a protocol error, as before)
    assert usage_counts(_chunk('{"prompt_tokens":3,"total_tokens":5}')) is None


DATA = __import__("pathlib").Path(__file__).parent / "data"


@pytest.mark.parametrize(
    ("name", "chat"),
    [("vllm_0_32_completions_continuous_usage.sse", False), ("vllm_0_32_chat_usage.sse", True)],
)
def test_streams_recorded_from_the_real_vllm_read_the_same_on_both_paths(
    name: str, chat: bool
) -> None:
    payloads = [p for p in SSEDecoder().feed((DATA / name).read_bytes()) if p != b"[DONE]"]
    rec, taken = _fast_then_slow(payloads, chat=chat)
    assert rec == _slow_only(payloads, chat=chat)
    usage = json.loads(payloads[-1])["usage"]
    assert rec.output_tokens == usage["completion_tokens"]
    assert rec.prompt_tokens == usage["prompt_tokens"]
    if not chat:
        # Mid-stream chunks with per-chunk usage take the byte fast path on a real server too.
        assert any(taken[:-1]), taken


def test_null_detail_members_as_sglang_sends_them_take_the_fast_path():
    # SGLang 0.5.23's UsageInfo (srt/entrypoints/openai/protocol.py) serialises
    # `"prompt_tokens_details":null` in every usage object: a null is not a count, skip it.
    payload = _chunk('{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2,'
                     '"prompt_tokens_details":null}')  # fmt: skip
    assert usage_counts(payload) == (2, 3)
    rec, taken = _fast_then_slow([payload], chat=False)
    assert taken == [True]
    assert rec == _slow_only([payload], chat=False)
