"""Per-request speculative figures as SGLang 0.5.23 gives them (docs/engines.md, "SGLang"):
`/generate`'s last `meta_info` carries `spec_verify_ct`, `spec_accept_length`,
`spec_accept_rate`, `spec_num_correct_drafts`, `spec_num_proposed_drafts`; the OpenAI endpoints
give the same in an extra `choices: []` chunk (`sglext.spec_tokens_details`) when the request
sets `return_spec_tokens_details: true`."""

from __future__ import annotations

import json

import pytest

from benchlib.simulator.profiles import PROFILES

from .conftest import call
from .test_protocol import make_app

EAGLE3 = PROFILES["eagle3"].replace(t0_ms=0.05, k_ms=0.0)
FIELDS = {
    "spec_verify_ct",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_num_correct_drafts",
    "spec_num_proposed_drafts",
}


def _body(path: str, **extra: object) -> dict[str, object]:
    body: dict[str, object] = {"max_tokens": 60, "stream": True, "ignore_eos": True, **extra}
    if "chat" in path:
        body["messages"] = [{"role": "user", "content": "hi"}]
    else:
        body["prompt"] = "hi"
    return body


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
async def test_openai_stream_gives_spec_tokens_details_before_the_usage_chunk(path: str) -> None:
    body = _body(path, return_spec_tokens_details=True, stream_options={"include_usage": True})
    events = (await call(make_app(profile=EAGLE3), "POST", path, body)).events()
    assert events[-1] == "[DONE]"
    sglext, usage = json.loads(events[-3]), json.loads(events[-2])
    assert sglext["choices"] == [] and "usage" not in sglext
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 60
    details = sglext["sglext"]["spec_tokens_details"]
    assert set(details) == FIELDS
    steps = details["spec_verify_ct"]
    # The first token comes from prefill; the 59 others from verify steps of 1..4 tokens.
    assert 59 / 4 <= steps < 59
    assert details["spec_accept_length"] == pytest.approx(60 / steps)
    assert details["spec_num_proposed_drafts"] == 3 * steps
    assert details["spec_num_correct_drafts"] == 59 - steps
    assert details["spec_accept_rate"] == pytest.approx((59 - steps) / (3 * steps))


async def test_without_the_flag_or_speculation_or_in_vllm_mode_there_is_no_sglext_chunk() -> None:
    asked = _body("/v1/completions", return_spec_tokens_details=True)
    for app, body in (
        (make_app(profile=EAGLE3), _body("/v1/completions")),
        (make_app(profile=PROFILES["fast"]), asked),
        (make_app(profile=EAGLE3, metrics_style="vllm"), asked),
    ):
        events = (await call(app, "POST", "/v1/completions", body)).events()
        assert all("sglext" not in json.loads(e) for e in events[:-1])
        assert all(json.loads(e)["choices"] for e in events[:-1])


async def test_generate_last_meta_info_carries_the_spec_figures() -> None:
    body = {"text": "hi", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}
    events = (
        await call(make_app(profile=EAGLE3), "POST", "/generate", {**body, "stream": True})
    ).events()
    metas = [json.loads(e)["meta_info"] for e in events[:-1]]
    assert set(metas[-1]) >= FIELDS
    assert not any(FIELDS & set(m) for m in metas[:-1])
    assert metas[-1]["spec_num_correct_drafts"] == 39 - metas[-1]["spec_verify_ct"]
