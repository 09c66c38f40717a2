"""The load generator's `/generate` handler on SGLang-shaped streams.

SGLang 0.5.23's streamed `/generate` chunks (docs/engines.md, "SGLang") carry the cumulative
`text`, the cumulative `output_ids` and then `meta_info` with the cumulative
`completion_tokens`; the chunks here are the simulator's encoding of that shape
(`benchlib.simulator.encode.generate_chunk`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from benchlib.loadgen import apis
from benchlib.loadgen.apis import Api, make_handler
from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.sse import SSEDecoder
from benchlib.loadgen.wire import SpecTokensDetails
from benchlib.simulator.encode import generate_chunk
from benchlib.simulator.protocol import GenRequest

SPEC: SpecTokensDetails = {
    "spec_verify_ct": 1500,
    "spec_accept_length": 2.6666,
    "spec_accept_rate": 0.5555,
    "spec_num_correct_drafts": 2499,
    "spec_num_proposed_drafts": 4500,
}


def _stream(tokens: int, step: int = 1) -> list[bytes]:
    req = GenRequest("generate", "m", 12, tokens, True, True, False, False)
    wire = b"".join(
        generate_chunk(
            req,
            "req-1",
            n,
            "length" if n == tokens else None,
            SPEC if n == tokens else None,
        )
        for n in range(step, tokens + 1, step)
    )
    return SSEDecoder().feed(wire + b"data: [DONE]\n\n")[:-1]


class _Counted:
    """Wraps a JSON parse function and records how many characters each call was handed."""

    def __init__(self, parse: Any) -> None:
        self.parse = parse
        self.sizes: list[int] = []

    def __call__(self, text: str, *args: Any) -> Any:
        self.sizes.append(len(text))
        return self.parse(text, *args)


def _drive(payloads: list[bytes], monkeypatch: pytest.MonkeyPatch | None = None) -> Any:
    """Feed the payloads as the client does: the fast path first, else a whole decode."""
    rec = RequestRecord(request_id="g")
    handler = make_handler(Api.GENERATE, rec, None)
    fast_sizes = _Counted(apis._parse_object)
    if monkeypatch is not None:
        monkeypatch.setattr(apis, "_parse_object", fast_sizes)
    slow_sizes: list[int] = []
    for i, payload in enumerate(payloads):
        if not handler.handle_fast(payload, float(i)):
            slow_sizes.append(len(payload))
            handler.handle(json.loads(payload.decode()), float(i))
    handler.finish()
    return rec, fast_sizes.sizes, slow_sizes


def test_per_event_parsing_does_not_grow_with_the_output_of_a_4000_token_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    payloads = _stream(4000)
    rec, parsed, decoded_whole = _drive(payloads, monkeypatch)
    assert rec.output_tokens == 4000
    assert decoded_whole == []  # no event went through the whole-chunk decode
    assert len(parsed) == len(payloads) == 4000
    # The chunk itself grows ~100x from token 40 to token 4000; what is parsed per event stays
    # the size of meta_info (its counts gain a few digits, the last one adds the spec figures).
    assert len(payloads[-1]) > 100 * len(payloads[39]) / 2
    assert max(parsed[:-1]) <= parsed[39] + 8
    assert parsed[-1] < 400
    # Over the stream: linear in its length, against the quadratic total of whole decodes.
    assert sum(parsed) < 100 * 4000
    assert sum(len(p) for p in payloads) > 150 * sum(parsed)


def test_fast_path_records_the_same_as_decoding_every_chunk_whole() -> None:
    payloads = _stream(300, step=3)
    fast, _, decoded_whole = _drive(payloads)
    assert decoded_whole == []
    slow = RequestRecord(request_id="g")
    handler = make_handler(Api.GENERATE, slow, None)
    for i, payload in enumerate(payloads):
        handler.handle(json.loads(payload), float(i))
    handler.finish()
    assert dataclasses.asdict(fast) == dataclasses.asdict(slow)
    assert fast.chunk_tokens == [3] * 100
    assert (fast.output_tokens, fast.prompt_tokens, fast.finish_reason) == (300, 12, "length")
    assert (fast.spec_steps, fast.spec_drafted, fast.spec_accepted) == (1500, 4500, 2499)


def test_spaced_json_and_other_member_orders_are_read_too() -> None:
    meta = {"completion_tokens": 5, "prompt_tokens": 2, "finish_reason": None}
    spaced = json.dumps({"text": 'say "meta_info": {}', "meta_info": meta, "index": 0})
    rec, _, decoded_whole = _drive([spaced.encode()])
    assert decoded_whole == []
    assert (rec.output_tokens, rec.chunk_tokens, rec.prompt_tokens) == (5, [5], 2)


def test_chunks_without_a_count_or_meta_info_take_the_whole_decode() -> None:
    error = b'{"error": {"message": "boom", "code": 500}}'
    uncounted = b'{"text": "hi", "meta_info": {"id": "x"}}'
    rec, _, decoded_whole = _drive([uncounted, error])
    assert decoded_whole == [len(uncounted), len(error)]
    assert rec.chunk_tokens == [1] and rec.chunk_tokens_estimated
    assert (rec.error_kind, rec.error) == ("server_error", "boom")


def test_meta_info_of_refuses_what_is_not_an_object() -> None:
    assert apis.meta_info_of(b'{"text":"a","meta_info":null}') is None
    assert apis.meta_info_of(b'{"text":"a","meta_info":{"completion_tokens":') is None
    assert apis.meta_info_of(b'{"text":"no key"}') is None
    assert apis.meta_info_of(b'{"meta_info":{"completion_tokens":3}}') == {"completion_tokens": 3}
