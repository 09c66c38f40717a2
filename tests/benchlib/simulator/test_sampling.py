"""Sampling weakens speculation in the simulator: a request with a temperature above 0 keeps
``sampled_accept_share`` of the drafts' gain (Profile.sampled_accept_length)."""

from __future__ import annotations

import pytest

from benchlib.simulator.cli import parse_config
from benchlib.simulator.profiles import PROFILES
from benchlib.simulator.protocol import Limits, parse_generate, parse_openai
from benchlib.simulator.scheduler import SchedulerCore, SimRequest

LIMITS = Limits(served_model="sim", max_model_len=4096, default_max_tokens=64)


def _serve(core: SchedulerCore, n: int, *, sampled: bool, category: str | None = None) -> float:
    """Tokens per verify step of ``n`` requests of 400 tokens (the prefill token left out)."""
    reqs = [
        SimRequest(request_id=f"{sampled}-{category}-{i}", prompt_tokens=8, max_tokens=400,
                   target=400, target_reason="length", arrival=0.0, category=category,
                   sampled=sampled)
        for i in range(n)
    ]  # fmt: skip
    for r in reqs:
        core.submit(r)
    core.admit(0.0)
    while core.running:
        core.advance()
    return sum(r.generated - 1 for r in reqs) / sum(r.spec_steps for r in reqs)


def test_a_sampled_request_accepts_the_configured_share_of_the_drafts_gain() -> None:
    profile = PROFILES["eagle3"].replace(category_accept_length=(("code", 1.6),))
    assert profile.sampled_accept_share == 0.6  # the default: sampling lowers acceptance
    core = SchedulerCore(profile, seed=3)
    greedy, sampled = _serve(core, 40, sampled=False), _serve(core, 40, sampled=True)
    assert greedy == pytest.approx(profile.accept_length, rel=0.03)
    assert sampled == pytest.approx(1 + 0.6 * (profile.accept_length - 1), rel=0.03)
    code = _serve(core, 40, sampled=True, category="code")
    assert code == pytest.approx(1 + 0.6 * 0.6, rel=0.03)  # its category's length, sampled
    # Share 1: sampling costs nothing.
    same = SchedulerCore(profile.replace(sampled_accept_share=1.0), seed=3)
    assert _serve(same, 40, sampled=True) == pytest.approx(profile.accept_length, rel=0.03)


def test_greedy_draws_are_unchanged_by_sampled_requests_beside_them() -> None:
    alone = SchedulerCore(PROFILES["eagle3"], seed=4)
    mixed = SchedulerCore(PROFILES["eagle3"], seed=4)
    _serve(mixed, 5, sampled=True)
    assert _serve(alone, 10, sampled=False) == _serve(mixed, 10, sampled=False)


def test_a_temperature_above_zero_samples_and_none_or_zero_is_greedy() -> None:
    body = {"model": "sim", "prompt": "hello", "max_tokens": 4}
    assert parse_openai("completions", {**body, "temperature": 1.0}, LIMITS).sampled
    assert not parse_openai("completions", {**body, "temperature": 0}, LIMITS).sampled
    assert not parse_openai("completions", body, LIMITS).sampled
    chat = {"model": "sim", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7}
    assert parse_openai("chat", chat, LIMITS).sampled
    generate = {"text": "hi", "sampling_params": {"temperature": 0.5, "max_new_tokens": 4}}
    assert parse_generate(generate, LIMITS).sampled


def test_the_share_is_a_flag_and_checked() -> None:
    cfg = parse_config(["--profile", "eagle3", "--sampled-accept-share", "0.8"])
    assert cfg.profile.sampled_accept_share == 0.8
    with pytest.raises(SystemExit):
        parse_config(["--profile", "eagle3", "--sampled-accept-share", "1.5"])


def test_a_sampled_requests_steps_count_in_the_servers_counters() -> None:
    # The counters' accept length (generated tokens less each request's prefill token, over
    # the verify steps) is what an experiment checks the client against: a sampled request's
    # steps must count there as its tokens do.
    profile = PROFILES["eagle3"]
    core = SchedulerCore(profile, seed=5)
    per_request = _serve(core, 40, sampled=True)
    from_counters = (core.generated_tokens - core.finished) / core.verify_steps
    assert from_counters == pytest.approx(per_request, rel=1e-9)
    assert from_counters == pytest.approx(1 + 0.6 * (profile.accept_length - 1), rel=0.03)
