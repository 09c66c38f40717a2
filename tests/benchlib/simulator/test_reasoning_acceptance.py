"""Reasoning mode's per-phase acceptance: the verify steps that start in a request's reasoning
draw at the profile's reasoning accept length, the rest at the answer's, and each request
counts its steps and their tokens per phase (what the truth log's `reasoning_verify_steps`,
`reasoning_step_tokens`, `answer_verify_steps` and `answer_step_tokens` hold)."""

from __future__ import annotations

import pytest

from benchlib.simulator.adaptive import profile_for_draft_length
from benchlib.simulator.cli import parse_config
from benchlib.simulator.profiles import PROFILES
from benchlib.simulator.scheduler import SchedulerCore, SimRequest


def _serve(core: SchedulerCore, n: int, length: int, reasoning: int) -> list[SimRequest]:
    reqs = [
        SimRequest(request_id=f"r{i}", prompt_tokens=8, max_tokens=length, target=length,
                   target_reason="length", arrival=0.0, reasoning_tokens=reasoning)
        for i in range(n)
    ]  # fmt: skip
    for r in reqs:
        core.submit(r)
    core.admit(0.0)
    while core.running:
        core.advance()
    return reqs


def test_each_phase_accepts_at_its_own_configured_length() -> None:
    profile = PROFILES["eagle3"]
    assert profile.reasoning_accept_length is not None
    assert profile.reasoning_accept_length != profile.accept_length  # the effect shows by default
    reqs = _serve(SchedulerCore(profile, seed=4), 40, 800, 400)
    r_steps = sum(r.phase_steps[0] for r in reqs)
    r_tokens = sum(r.phase_steps[1] for r in reqs)
    a_steps = sum(r.phase_steps[2] for r in reqs)
    a_tokens = sum(r.phase_steps[3] for r in reqs)
    # 5,000-6,000 steps a phase: the standard error of a mean of draws from 1..4 is under 0.015.
    assert r_tokens / r_steps == pytest.approx(profile.reasoning_accept_length, rel=0.03)
    assert a_tokens / a_steps == pytest.approx(profile.accept_length, rel=0.03)
    for r in reqs:
        # Every verify step is in one phase; every token but the prefill's came from one.
        assert r.phase_steps[0] + r.phase_steps[2] == r.spec_steps
        assert r.phase_steps[1] + r.phase_steps[3] == r.generated - 1 == 799
        # The reasoning's steps hold its tokens after the prefill's, and at most the crossing
        # step's answer tokens (a step drafts 3, so at most 3 of them).
        assert 399 <= r.phase_steps[1] <= 399 + 3


def test_without_a_reasoning_phase_nothing_is_counted_per_phase() -> None:
    reqs = _serve(SchedulerCore(PROFILES["eagle3"], seed=4), 3, 50, 0)
    assert all(r.phase_steps == [0, 0, 0, 0] for r in reqs)


def test_a_shorter_draft_keeps_the_reasoning_phase_apart() -> None:
    eagle = PROFILES["eagle3"]
    one = profile_for_draft_length(eagle, 1)
    assert one.reasoning_accept_length is not None and one.accept_length is not None
    assert 1.0 < one.accept_length < one.reasoning_accept_length < 2.0
    assert profile_for_draft_length(eagle, 0).reasoning_accept_length is None


def test_the_reasoning_accept_length_is_parsed_and_checked() -> None:
    assert parse_config(["--profile", "eagle3"]).profile.reasoning_accept_length == 3.2
    cfg = parse_config(["--profile", "eagle3", "--reasoning-accept-length", "1.8"])
    assert cfg.profile.reasoning_accept_length == 1.8
    with pytest.raises(SystemExit):
        parse_config(["--profile", "eagle3", "--reasoning-accept-length", "4.5"])
    with pytest.raises(SystemExit):
        parse_config(["--profile", "baseline", "--reasoning-accept-length", "2"])
    # The profile's own 3.2 is impossible with 2 drafts: the reasoning then accepts as the
    # answer does rather than the flag being refused.
    assert (
        parse_config(["--profile", "eagle3", "--spec-steps", "2"]).profile.reasoning_accept_length
        is None
    )
