"""llama.cpp's metrics from scrapes recorded from a real llama-server (llama.cpp 0c1e570, the
llama-cpp-python 0.3.36 sdist), speculating with the project's tiny models (agreement 2/3,
--spec-draft-n-max 3): 3 requests of 64 tokens between the scrapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from hosts.telemetry.deltas import interval_between
from hosts.telemetry.engine_profiles import Engine
from hosts.telemetry.prometheus import parse_engine_metrics

DATA = Path(__file__).parent / "data"


def scrape(name: str, at: float):
    return parse_engine_metrics((DATA / name).read_text(), scraped_at=at)


def test_accept_length_from_llamacpps_drafts_and_accepted_tokens():
    before = scrape("llamacpp_real_scrape1.prom", at=0.0)
    after = scrape("llamacpp_real_scrape2.prom", at=2.0)
    assert after.engine == Engine.LLAMACPP
    interval = interval_between(before, after)
    assert interval.generation_tokens == 3 * 64
    assert (interval.spec_drafts, interval.spec_accepted_tokens) == (63, 126)
    # 2 draft tokens accepted per verify step, plus the target's own: 3 tokens per step.
    assert interval.accept_length == pytest.approx(1 + 126 / 63)
    assert interval.accept_length_source == "counters"
    assert interval.spec_draft_tokens is not None
    assert interval.acceptance_rate == pytest.approx(126 / interval.spec_draft_tokens)
