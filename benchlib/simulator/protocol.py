from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from benchlib.json_types import JsonObject

Kind = Literal["completions", "chat", "generate"]

# Prompt length is estimated like a typical BPE tokenizer on English text: ~4 characters a token.
CHARS_PER_TOKEN = 4
CHAT_TOKENS_PER_MESSAGE = 4


class ApiError(Exception):
    """An error answered with an OpenAI-style body {"error": {message, type, param, code}}."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return json.dumps({"error": error}).encode()


@dataclass(frozen=True)
class GenRequest:
    kind: Kind
    model: str
    prompt_tokens: int
    max_tokens: int
    stream: bool
    ignore_eos: bool
    include_usage: bool
    continuous_usage: bool
    # SGLang's `return_spec_tokens_details` (OpenAI endpoints): the finished request's
    # speculative figures in an extra `choices: []` chunk under `sglext.spec_tokens_details`.
    spec_details: bool = False
    # Chat: each message prefix as (digest of the messages so far, their tokens), for the
    # prefix cache (--prefix-cache): a later turn that repeats the history finds it cached.
    prefixes: tuple[tuple[bytes, int], ...] = ()
    # The request samples (a temperature above 0): speculation accepts less of its drafts
    # (Profile.sampled_accept_share). No temperature counts as greedy here.
    sampled: bool = False


@dataclass(frozen=True)
class Limits:
    served_model: str
    max_model_len: int
    default_max_tokens: int


def _missing(name: str) -> ApiError:
    return ApiError(
        400, f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter"
    )


def _wrong_type(name: str, expected: str) -> ApiError:
    return ApiError(400, f"Parameter '{name}' must be {expected}.", param=name, code="invalid_type")


def load_json_object(body: bytes) -> JsonObject:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "Request body is not valid JSON.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "Request body must be a JSON object.", code="invalid_json")
    return data


def _opt_bool(data: Mapping[str, object], name: str, default: bool = False) -> bool:
    value = data.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _wrong_type(name, "a boolean")
    return value


def _opt_int(data: Mapping[str, object], name: str) -> int | None:
    value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _wrong_type(name, "an integer")
    return value


def _check_number(data: Mapping[str, object], name: str) -> None:
    value = data.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise _wrong_type(name, "a number")


def _samples(data: Mapping[str, object]) -> bool:
    """Whether the (checked) body asks for sampling: a temperature above 0."""
    temperature = data.get("temperature")
    return isinstance(temperature, int | float) and temperature > 0


def _text_tokens(text: str) -> int:
    return max(1, (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN)


def _is_token_ids(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    )


def prompt_tokens_of(prompt: object, name: str = "prompt") -> int:
    if isinstance(prompt, str):
        return _text_tokens(prompt)
    if _is_token_ids(prompt):
        assert isinstance(prompt, list)
        if not prompt:
            raise ApiError(400, f"'{name}' must not be empty.", param=name, code="invalid_value")
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1:
        return prompt_tokens_of(prompt[0], name)
    if isinstance(prompt, list):
        raise ApiError(
            400,
            "Batched prompts are not supported; send one prompt.",
            param=name,
            code="invalid_value",
        )
    raise _wrong_type(name, "a string or a list of token ids")


def _chat_prompt_tokens(messages: object) -> int:
    if not isinstance(messages, list) or not messages:
        raise _wrong_type("messages", "a non-empty array of message objects")
    total = 0
    for message in messages:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _wrong_type("messages", "an array of objects with a string 'role'")
        content = message.get("content")
        if isinstance(content, str):
            total += _text_tokens(content)
        elif isinstance(content, list):
            for part in content:
                text = part.get("text") if isinstance(part, dict) else None
                if isinstance(text, str):
                    total += _text_tokens(text)
        elif content is not None:
            raise _wrong_type("messages", "an array of messages with string or array content")
        total += CHAT_TOKENS_PER_MESSAGE
    return total


def _check_model(data: Mapping[str, object], limits: Limits) -> str:
    model = data.get("model")
    if model is None:
        return limits.served_model
    if not isinstance(model, str):
        raise _wrong_type("model", "a string")
    if model != limits.served_model:
        raise ApiError(
            404,
            f"The model `{model}` does not exist.",
            type_="NotFoundError",
            param="model",
            code="model_not_found",
        )
    return model


def _check_length(name: str, max_tokens: int, prompt: int, limits: Limits) -> None:
    if max_tokens < 1:
        raise ApiError(
            400, f"'{name}' must be at least 1, got {max_tokens}.", param=name, code="invalid_value"
        )
    if prompt + max_tokens > limits.max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {limits.max_model_len} tokens. However, you "
            f"requested {prompt + max_tokens} tokens ({prompt} in the prompt, {max_tokens} for "
            f"the completion). Please reduce the prompt or '{name}'.",
            param=name,
            code="invalid_value",
        )


def parse_openai(kind: Kind, data: Mapping[str, object], limits: Limits) -> GenRequest:
    """Validate a /v1/completions or /v1/chat/completions body."""
    model = _check_model(data, limits)
    if kind == "chat":
        if "messages" not in data:
            raise _missing("messages")
        prompt = _chat_prompt_tokens(data["messages"])
        length_name = "max_completion_tokens" if "max_completion_tokens" in data else "max_tokens"
        default_max = limits.default_max_tokens
    else:
        if "prompt" not in data:
            raise _missing("prompt")
        prompt = prompt_tokens_of(data["prompt"])
        length_name, default_max = "max_tokens", 16
    requested = _opt_int(data, length_name)
    max_tokens = default_max if requested is None else requested
    _check_length(length_name, max_tokens, prompt, limits)
    n = _opt_int(data, "n")
    if n is not None and n != 1:
        raise ApiError(400, "Only n=1 is supported.", param="n", code="invalid_value")
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        _check_number(data, name)
    stream = _opt_bool(data, "stream")
    options = data.get("stream_options")
    include_usage = continuous = False
    if options is not None:
        if not isinstance(options, dict):
            raise _wrong_type("stream_options", "an object")
        if not stream:
            raise ApiError(
                400,
                "'stream_options' is only allowed when 'stream' is true.",
                param="stream_options",
                code="invalid_value",
            )
        include_usage = _opt_bool(options, "include_usage")
        continuous = _opt_bool(options, "continuous_usage_stats")
    return GenRequest(
        kind=kind,
        model=model,
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        stream=stream,
        ignore_eos=_opt_bool(data, "ignore_eos"),
        include_usage=include_usage,
        continuous_usage=continuous,
        spec_details=_opt_bool(data, "return_spec_tokens_details"),
        prefixes=_message_prefixes(data["messages"]) if kind == "chat" else (),
        sampled=_samples(data),
    )


def _message_prefixes(messages: object) -> tuple[tuple[bytes, int], ...]:
    assert isinstance(messages, list)  # checked by _chat_prompt_tokens
    out: list[tuple[bytes, int]] = []
    digest = hashlib.blake2b(digest_size=16)
    tokens = 0
    for message in messages:
        digest.update(json.dumps(message, sort_keys=True).encode())
        tokens += _chat_prompt_tokens([message])
        out.append((digest.copy().digest(), tokens))
    return tuple(out)


def parse_generate(data: Mapping[str, object], limits: Limits) -> GenRequest:
    """Validate an SGLang-native /generate body."""
    if "text" in data:
        prompt = prompt_tokens_of(data["text"], "text")
    elif "input_ids" in data:
        prompt = prompt_tokens_of(data["input_ids"], "input_ids")
    else:
        raise _missing("text")
    params = data.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise _wrong_type("sampling_params", "an object")
    requested = _opt_int(params, "max_new_tokens")
    max_tokens = 128 if requested is None else requested
    _check_length("max_new_tokens", max_tokens, prompt, limits)
    _check_number(params, "temperature")
    return GenRequest(
        kind="generate",
        model=limits.served_model,
        prompt_tokens=prompt,
        max_tokens=max_tokens,
        stream=_opt_bool(data, "stream"),
        ignore_eos=_opt_bool(params, "ignore_eos"),
        include_usage=False,
        continuous_usage=False,
        sampled=_samples(params),
    )
