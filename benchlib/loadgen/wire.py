from __future__ import annotations

# The bodies on the wire of the engine APIs the load generator speaks: what `apis.build_body`
# sends, and the streamed chunks `apis`' handlers read (as far as they read them). Field names
# and meanings are the engines' (OpenAI's API as vLLM, SGLang and llama.cpp serve it, and SGLang's
# native `/generate`); the simulator answers in the same shapes.
from typing import Literal, NotRequired, TypedDict

from benchlib.json_types import JsonObject


# The request bodies `build_body` sends, one per API (before a user's `extra` fields, which are
# free-form and merged last).
class GenerateSampling(TypedDict):
    """SGLang `/generate`'s `sampling_params` (python/sglang/srt/sampling/sampling_params.py)."""

    max_new_tokens: int
    ignore_eos: bool
    temperature: NotRequired[float]


class GenerateRequest(TypedDict):
    """SGLang's native `/generate` body (python/sglang/srt/managers/io_struct.py
    GenerateReqInput)."""

    text: str
    sampling_params: GenerateSampling
    stream: Literal[True]
    model: NotRequired[str]


class StreamOptions(TypedDict):
    include_usage: bool
    # vLLM's extension (usage on every chunk); SGLang and llama.cpp ignore it.
    continuous_usage_stats: bool


class ChatMessage(TypedDict):
    role: str
    content: str


class OpenAIRequest(TypedDict):
    """An OpenAI `/v1/completions` (`prompt`) or `/v1/chat/completions` (`messages`) body."""

    model: str
    max_tokens: int
    stream: Literal[True]
    stream_options: StreamOptions
    messages: NotRequired[list[ChatMessage]]
    prompt: NotRequired[str]
    # vLLM's and SGLang's extension: generate max_tokens whatever the model's end token.
    ignore_eos: NotRequired[bool]
    temperature: NotRequired[float]


class SglangSpecDetailsAsk(TypedDict):
    """The field that asks SGLang's OpenAI endpoints for a request's own speculative figures."""

    return_spec_tokens_details: bool


# The streamed chunks the handlers read, as far as they read them. Every member is optional
# (`total=False`): engines differ in what they send, and each read tolerates an absent member.
class Usage(TypedDict, total=False):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChoiceDelta(TypedDict, total=False):
    role: str
    content: str | None
    # vLLM's `reasoning`; SGLang's and older vLLM's `reasoning_content`.
    reasoning: str | None
    reasoning_content: str | None
    tool_calls: list[JsonObject]


class StreamChoice(TypedDict, total=False):
    index: int
    text: str  # /v1/completions
    delta: ChoiceDelta  # /v1/chat/completions
    finish_reason: str | None


class SpecTokensDetails(TypedDict, total=False):
    """SGLang's per-request speculative figures (`meta_info` of `/generate`,
    `sglext.spec_tokens_details` on its OpenAI endpoints)."""

    spec_verify_ct: int
    spec_num_proposed_drafts: int
    spec_num_correct_drafts: int
    spec_accept_length: float
    spec_accept_rate: float


class SglangExtension(TypedDict, total=False):
    spec_tokens_details: SpecTokensDetails


class OpenAIStreamChunk(TypedDict, total=False):
    """One SSE event of `/v1/completions` or `/v1/chat/completions`, with the engines'
    extensions the handler reads; an error event carries `error` (or `object: "error"`)."""

    object: str
    choices: list[StreamChoice]
    usage: Usage | None
    timings: object  # llama.cpp's; read_llamacpp_timings checks its shape
    metrics: object  # vLLM's; read_vllm_spec_metrics checks its shape
    sglext: SglangExtension
    error: object
    message: str


class GenerateFinishReason(TypedDict, total=False):
    type: str  # "length", "stop" or "abort", with the member that goes with it
    length: int
    matched: int | str
    message: str


class GenerateMetaInfo(SpecTokensDetails, total=False):
    id: str
    finish_reason: GenerateFinishReason | str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int
    e2e_latency: float  # on the finished request


class CompletionChoice(TypedDict):
    index: int
    text: str
    logprobs: None
    finish_reason: str


class ChatChoice(TypedDict):
    index: int
    message: ChatMessage
    logprobs: None
    finish_reason: str


class CompletionResponse(TypedDict):
    """The whole answer to a request with `stream: false`, on either OpenAI endpoint."""

    id: str
    object: str  # "text_completion" or "chat.completion"
    created: int
    model: str
    choices: list[CompletionChoice] | list[ChatChoice]
    usage: Usage


class GenerateChunk(TypedDict, total=False):
    """One SSE event of SGLang's `/generate`; an error event carries `error` instead."""

    text: str
    meta_info: GenerateMetaInfo
    object: str
    error: object
    message: str
