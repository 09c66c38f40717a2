from __future__ import annotations

# Request bodies and streamed-chunk handling for each supported API.
#
# The handlers run once per SSE event, so they do as little as possible: read the cumulative token
# count the server reports, append one (time, tokens) pair, keep the finish reason and usage. Their
# work per event must not grow with the output so far (a /generate chunk repeats all of it).
import enum
import json
from collections.abc import Mapping
from typing import Any, Protocol

from benchlib.json_types import JsonObject
from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.wire import (
    ChatMessage,
    ChoiceDelta,
    GenerateChunk,
    GenerateMetaInfo,
    GenerateRequest,
    GenerateSampling,
    OpenAIRequest,
    OpenAIStreamChunk,
    SglangSpecDetailsAsk,
    SpecTokensDetails,
    StreamOptions,
)


class Api(enum.StrEnum):
    COMPLETIONS = "completions"
    CHAT = "chat"
    GENERATE = "generate"


PATHS: dict[Api, str] = {
    Api.COMPLETIONS: "/v1/completions",
    Api.CHAT: "/v1/chat/completions",
    Api.GENERATE: "/generate",
}


# SGLang gives a request's own speculative figures on its OpenAI endpoints only when asked
# (docs/engines.md, "SGLang"); other engines do not know the field (vLLM logs a warning for every
# request carrying an unknown field), so it is sent to SGLang servers alone.
SGLANG_SPEC_DETAILS = SglangSpecDetailsAsk(return_spec_tokens_details=True)


def engine_extra_body(engine: str, api: Api) -> JsonObject:
    """Body fields a request to `engine` (a profile's engine name) should carry on `api` so the
    server reports the request's speculative figures; merge them into `build_body`'s `extra`."""
    if engine in ("sglang", "simulator") and api is not Api.GENERATE:
        # The simulator in its (default) SGLang mode answers as SGLang does; in vLLM mode it
        # ignores the field.
        return dict(SGLANG_SPEC_DETAILS)
    return {}


class TokenCounter(Protocol):
    tokens: int


def build_body(
    api: Api,
    *,
    model: str,
    prompt: str,
    max_tokens: int,
    ignore_eos: bool = False,
    temperature: float | None = None,
    extra: JsonObject | None = None,
) -> JsonObject:
    """The JSON body of one streamed request; `extra` fields are merged last (they win)."""
    if api is Api.GENERATE:
        sampling = GenerateSampling(max_new_tokens=max_tokens, ignore_eos=ignore_eos)
        if temperature is not None:
            sampling["temperature"] = temperature
        generate = GenerateRequest(text=prompt, sampling_params=sampling, stream=True)
        if model:
            generate["model"] = model
        body: JsonObject = dict(generate)
    else:
        openai = OpenAIRequest(
            model=model,
            max_tokens=max_tokens,
            stream=True,
            stream_options=StreamOptions(include_usage=True, continuous_usage_stats=True),
        )
        if api is Api.CHAT:
            openai["messages"] = [ChatMessage(role="user", content=prompt)]
        else:
            openai["prompt"] = prompt
        if ignore_eos:
            openai["ignore_eos"] = True
        if temperature is not None:
            openai["temperature"] = temperature
        body = dict(openai)
    if extra:
        for key, value in extra.items():
            current = body.get(key)
            if isinstance(value, dict) and isinstance(current, dict):
                body[key] = {**current, **value}
            else:
                body[key] = value
    return body


def _error_text(obj: Mapping[str, object]) -> str | None:
    err = obj.get("error")
    if err is not None:
        if isinstance(err, dict):
            return str(err.get("message") or err)
        return str(err)
    if obj.get("object") == "error":
        return str(obj.get("message") or obj)
    return None


def _read_error(obj: Mapping[str, object], rec: RequestRecord) -> None:
    """An event that carries an error rather than tokens: the server's message on the record
    (cut to 500 characters); nothing for an event that is neither."""
    text = _error_text(obj)
    if text is not None:
        rec.error_kind = "server_error"
        rec.error = text[:500]


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def read_llamacpp_timings(timings: object, rec: RequestRecord) -> None:
    """llama.cpp's per-request `timings` (on the final chunk of a stream, and on non-streamed
    responses): `draft_n` tokens drafted, `draft_n_accepted` accepted, `predicted_n` generated.

    llama.cpp gives no verify-step count; the first token comes from the prompt's logits (no
    step: server-common.h `n_gen_steps`) and each verify step emits its accepted drafts plus one
    token, so steps = predicted_n - 1 - draft_n_accepted (one more where the last token was
    decoded with no room left to draft). Absent when the server drafted nothing."""
    if not isinstance(timings, dict):
        return
    drafted, accepted = _count(timings.get("draft_n")), _count(timings.get("draft_n_accepted"))
    if drafted is None or accepted is None:
        return
    rec.spec_drafted, rec.spec_accepted = drafted, accepted
    predicted = _count(timings.get("predicted_n"))
    if predicted is not None and predicted > accepted + 1:
        rec.spec_steps = predicted - 1 - accepted


def read_vllm_spec_metrics(metrics: object, rec: RequestRecord) -> None:
    """vLLM's per-request figures (`--per-request-spec-decode-metrics summary`, vLLM 0.32): on
    the final usage chunk, `metrics.speculative_decoding` with `num_spec_steps` verify steps,
    `num_draft_tokens` drafted and `num_accepted_draft_tokens` accepted (v1/metrics/stats.py
    RequestSpecDecodeMetrics.to_dict: the same events as the `vllm:spec_decode_*` counters)."""
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if not isinstance(spec, dict):
        return
    _read_spec_counts(spec, rec, "num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens")


def read_sglang_meta(meta: SpecTokensDetails, rec: RequestRecord) -> None:
    """SGLang's per-request figures, in `meta_info` of a finished speculative `/generate`
    request or in `sglext.spec_tokens_details` on its OpenAI endpoints (same names):
    `spec_verify_ct` verify steps, `spec_num_proposed_drafts` drafted and
    `spec_num_correct_drafts` accepted draft tokens."""
    _read_spec_counts(
        meta, rec, "spec_verify_ct", "spec_num_proposed_drafts", "spec_num_correct_drafts"
    )


def _read_spec_counts(
    figures: Mapping[str, object], rec: RequestRecord, steps: str, drafted: str, accepted: str
) -> None:
    """The record's verify steps, drafted and accepted tokens from an engine's keys for them;
    none where the engine counted no verify step (the request was not speculative)."""
    step_count = _count(figures.get(steps))
    if step_count is None:
        return
    rec.spec_steps = step_count
    rec.spec_drafted = _count(figures.get(drafted))
    rec.spec_accepted = _count(figures.get(accepted))


class ChunkHandler:
    """Turns one request's decoded SSE events into its record (one instance per request)."""

    __slots__ = ("counted", "live", "rec")

    def __init__(self, rec: RequestRecord, live: TokenCounter | None) -> None:
        self.rec = rec
        self.live = live
        self.counted = 0  # tokens attributed to chunks so far

    def _add(self, now: float, n: int) -> None:
        rec = self.rec
        if rec.first_token is None:
            rec.first_token = now
        rec.chunk_times.append(now)
        rec.chunk_tokens.append(n)
        self.counted += n
        if self.live is not None:
            self.live.tokens += n

    def handle(self, obj: Any, now: float) -> None:
        raise NotImplementedError

    def handle_fast(self, payload: bytes, now: float) -> bool:
        """Handle `payload` without a JSON decode when it has the common shape; False: not done,
        decode it and call `handle`."""
        return False

    def finish(self) -> None:
        """After the stream ends: settle the output token count."""
        rec = self.rec
        if rec.output_tokens == 0 and self.counted:
            rec.output_tokens = self.counted
            rec.output_tokens_estimated = rec.chunk_tokens_estimated


# The fast path's markers. Inside a JSON string every `"` is escaped, so these byte sequences (each
# with unescaped quotes) can only be real keys, never text a model produced.
_USAGE_KEY = b'"usage":{'
_OPEN_NULL = b'"finish_reason":null'
_ONE_CHOICE = b'"choices":[{'
_REASONING_KEY = b'"reasoning'  # vLLM's `reasoning`, SGLang's and older vLLM's `reasoning_content`


def usage_counts(payload: bytes) -> tuple[int, int | None] | None:
    """(completion_tokens, prompt_tokens) of a compact OpenAI stream chunk whose last top-level
    member is a flat `"usage":{...}` of integers; None for anything else (then decode the JSON).

    The shape every per-chunk-usage server sends for a chunk in mid-stream (vLLM, SGLang, the
    simulator): `{..."choices":[{... "finish_reason":null ...}],"usage":{"prompt_tokens":P,
    "completion_tokens":N,"total_tokens":T,"prompt_tokens_details":null}}`, with the keys in
    any order and any `null` members skipped.
    """
    if payload[-2:] != b"}}" or payload[:1] != b"{":
        return None
    i = payload.rfind(_USAGE_KEY)
    if i <= 0 or payload[i - 1] != 0x2C:  # "usage" must follow a "," at the top level
        return None
    completion: int | None = None
    prompt: int | None = None
    for member in payload[i + len(_USAGE_KEY) : -2].split(b","):
        key, colon, value = member.partition(b":")
        if colon and value == b"null":
            # vLLM and SGLang send `"prompt_tokens_details":null` (and vLLM
            # `"completion_tokens_details":null`) in every usage object: not a count.
            continue
        if not colon or not value.isdigit():
            return None  # a nested object (details), a float, spaces: not the common shape
        if key == b'"completion_tokens"':
            completion = int(value)
        elif key == b'"prompt_tokens"':
            prompt = int(value)
        elif key[:1] != b'"' or key[-1:] != b'"':
            return None
    if completion is None:
        return None
    return completion, prompt


class OpenAIHandler(ChunkHandler):
    """/v1/completions and /v1/chat/completions, with or without per-chunk usage."""

    __slots__ = ("answered", "chat")

    def __init__(self, rec: RequestRecord, live: TokenCounter | None, *, chat: bool) -> None:
        super().__init__(rec, live)
        self.chat = chat
        # Chat: until the answer starts, a chunk with a reasoning delta (vLLM `reasoning`, older
        # vLLM and SGLang `reasoning_content`) and the one after it are decoded to find it.
        self.answered = not chat

    def _phase(self, delta: ChoiceDelta, now: float) -> None:
        """Note the reasoning phase and where the answer starts, before this chunk's tokens
        are added: the tokens counted so far are the reasoning's."""
        rec = self.rec
        if (delta.get("reasoning_content") or delta.get("reasoning")) and (
            rec.reasoning_tokens is None
        ):
            rec.reasoning_tokens = 0
        # Not `elif`: vLLM's reasoning parsers send one delta with both fields when a step's
        # tokens cross the end of the reasoning. Its answer token arrived now, so the answer
        # starts here; the delta's tokens count as the answer's (the split inside one delta is
        # not in the stream), which moves at most one step between the phases.
        if (delta.get("content") or delta.get("tool_calls")) and not self.answered:
            self.answered = True
            if rec.reasoning_tokens is not None:
                rec.first_answer = now
                rec.reasoning_tokens = self.counted

    def finish(self) -> None:
        super().finish()
        rec = self.rec
        if rec.reasoning_tokens is not None and not self.answered:
            rec.reasoning_tokens = self.counted  # it ended while still reasoning

    def handle_fast(self, payload: bytes, now: float) -> bool:
        # A mid-stream chunk with per-chunk usage: exactly one choice, finish_reason null, and the
        # usage last. `handle` would take the token count from usage and nothing else from it, so
        # reading the counts is the whole job. The last chunk (finish_reason set), usage-only tails,
        # errors and every other shape go through the JSON decode.
        # A reasoning delta, or the chunk after one (the answer may start there): decoded. The key
        # with its unescaped quote cannot occur inside generated text.
        if not self.answered and (
            _REASONING_KEY in payload or self.rec.reasoning_tokens is not None
        ):
            return False
        if payload.count(_OPEN_NULL) != 1 or payload.count(_ONE_CHOICE) != 1:
            return False
        counts = usage_counts(payload)
        if counts is None:
            return False
        completion, prompt = counts
        n = completion - self.counted
        if n > 0:
            self.answered = True  # tokens before any reasoning: a stream without that phase
            self._add(now, n)
        rec = self.rec
        rec.output_tokens = completion
        if prompt is not None:
            rec.prompt_tokens = prompt
        return True

    def handle(self, obj: OpenAIStreamChunk, now: float) -> None:
        usage = obj.get("usage")
        choices = obj.get("choices")
        rec = self.rec
        timings = obj.get("timings")
        if timings is not None:
            read_llamacpp_timings(timings, rec)
        metrics = obj.get("metrics")
        if metrics is not None:
            read_vllm_spec_metrics(metrics, rec)
        if choices:
            choice = choices[0]
            if self.chat and not self.answered:
                self._phase(choice.get("delta") or ChoiceDelta(), now)
            if usage:
                n = usage["completion_tokens"] - self.counted
            else:
                if self.chat:
                    delta = choice.get("delta") or ChoiceDelta()
                    has_text = bool(
                        delta.get("content")
                        or delta.get("reasoning_content")
                        or delta.get("reasoning")
                        or delta.get("tool_calls")
                    )
                else:
                    has_text = bool(choice.get("text"))
                n = 1 if has_text else 0
                if n:
                    rec.chunk_tokens_estimated = True
            if n > 0:
                self._add(now, n)
            reason = choice.get("finish_reason")
            if reason:
                rec.finish_reason = reason
        elif (sglext := obj.get("sglext")) is not None:
            # SGLang's `choices: []` chunk for `return_spec_tokens_details` (a list with n > 1).
            details = sglext.get("spec_tokens_details") if isinstance(sglext, dict) else None
            if isinstance(details, dict):
                read_sglang_meta(details, rec)
        elif usage is None:
            _read_error(obj, rec)
            return
        if usage:
            rec.output_tokens = usage.get("completion_tokens") or 0
            prompt = usage.get("prompt_tokens")
            if prompt is not None:
                rec.prompt_tokens = prompt


# `/generate`'s chunks repeat the whole output so far (cumulative `text` and `output_ids`), then
# `meta_info` last; decoding each whole chunk would make a request's parsing quadratic in its
# length. The fast path finds the `meta_info` key from the end and parses that object alone. The
# key with both quotes unescaped cannot occur inside a JSON string, only as a real key.
_META_KEY = b'"meta_info":'
_parse_object = json.JSONDecoder().raw_decode


def meta_info_of(payload: bytes) -> GenerateMetaInfo | None:
    """The `meta_info` object of a `/generate` chunk, parsed without the text and ids before it;
    None when the chunk has no such key or it does not hold an object."""
    i = payload.rfind(_META_KEY)
    if i < 0:
        return None
    try:
        text = payload[i + len(_META_KEY) :].decode().lstrip()
        # Declared as what it should be; the isinstance below checks it is an object at all.
        meta: GenerateMetaInfo
        meta, _ = _parse_object(text)
    except ValueError:  # UnicodeDecodeError included
        return None
    return meta if isinstance(meta, dict) else None


class GenerateHandler(ChunkHandler):
    """SGLang's native /generate: `meta_info.completion_tokens` is cumulative on every chunk."""

    __slots__ = ()

    def handle_fast(self, payload: bytes, now: float) -> bool:
        # Everything but a chunk without a token count (then the text is what counts) is read
        # from meta_info alone; errors and other shapes have no meta_info and are decoded whole.
        meta = meta_info_of(payload)
        if meta is None or meta.get("completion_tokens") is None:
            return False
        self._meta(meta, now, None)
        return True

    def handle(self, obj: GenerateChunk, now: float) -> None:
        rec = self.rec
        meta = obj.get("meta_info")
        if meta is None:
            _read_error(obj, rec)
            return
        self._meta(meta, now, obj)

    def _meta(self, meta: GenerateMetaInfo, now: float, obj: GenerateChunk | None) -> None:
        rec = self.rec
        total = meta.get("completion_tokens")
        if total is None:
            if obj is not None and obj.get("text"):
                rec.chunk_tokens_estimated = True
                self._add(now, 1)
        else:
            n = total - self.counted
            if n > 0:
                self._add(now, n)
            rec.output_tokens = total
        prompt = meta.get("prompt_tokens")
        if prompt is not None:
            rec.prompt_tokens = prompt
        reason = meta.get("finish_reason")
        if reason:
            rec.finish_reason = reason.get("type") if isinstance(reason, dict) else str(reason)
        if "spec_verify_ct" in meta:
            read_sglang_meta(meta, rec)


def make_handler(api: Api, rec: RequestRecord, live: TokenCounter | None) -> ChunkHandler:
    if api is Api.GENERATE:
        return GenerateHandler(rec, live)
    return OpenAIHandler(rec, live, chat=api is Api.CHAT)
