from __future__ import annotations

import pytest

from benchlib.simulator.cli import parse_config
from benchlib.simulator.generation import spec_meta
from benchlib.simulator.profiles import PROFILES
from benchlib.simulator.scheduler import SchedulerCore, SimRequest


def _serve(core: SchedulerCore, category: str | None, n: int, length: int) -> list[SimRequest]:
    reqs = [
        SimRequest(request_id=f"{category}-{i}", prompt_tokens=8, max_tokens=length,
                   target=length, target_reason="length", arrival=0.0, category=category)
        for i in range(n)
    ]  # fmt: skip
    for r in reqs:
        core.submit(r)
    core.admit(0.0)
    while core.running:
        core.advance()
    return reqs


def test_each_category_gets_its_own_accept_length() -> None:
    profile = PROFILES["eagle3"].replace(category_accept_length=(("chat", 3.2), ("code", 1.6)))
    core = SchedulerCore(profile, seed=2)
    for category, expected in (("chat", 3.2), ("code", 1.6), (None, profile.accept_length)):
        reqs = _serve(core, category, 40, 400)
        tokens = sum(r.generated for r in reqs)
        steps = sum(r.spec_steps for r in reqs)
        assert tokens / steps == pytest.approx(expected, rel=0.03), category
        # each request's first token comes from its prefill (no verify step); every verify
        # step emits its accepted drafts plus one token
        assert sum(r.spec_accepted for r in reqs) == tokens - len(reqs) - steps
        assert all(r.spec_drafted == 3 * r.spec_steps for r in reqs)


def test_a_finished_request_reports_sglang_shaped_figures() -> None:
    core = SchedulerCore(PROFILES["eagle3"], seed=1)
    (req,) = _serve(core, None, 1, 50)
    meta = spec_meta(req)
    assert meta["spec_verify_ct"] == req.spec_steps
    assert meta["spec_num_correct_drafts"] == 50 - 1 - req.spec_steps  # 1: the prefill token
    assert meta["spec_num_proposed_drafts"] == 3 * req.spec_steps
    assert meta["spec_accept_length"] == 50 / req.spec_steps
    baseline = SchedulerCore(PROFILES["baseline"], seed=1)
    assert spec_meta(_serve(baseline, None, 1, 10)[0]) == {}


def test_category_accept_lengths_are_parsed_and_checked() -> None:
    cfg = parse_config(["--profile", "eagle3", "--category-accept-length", "chat=2.7,code=1.9"])
    assert cfg.profile.category_accept_length == (("chat", 2.7), ("code", 1.9))
    with pytest.raises(SystemExit):
        parse_config(["--profile", "eagle3", "--category-accept-length", "code=9"])
    with pytest.raises(SystemExit):
        parse_config(["--profile", "baseline", "--category-accept-length", "code=1.5"])
