"""The workload each run was measured under (its prompts, arrivals, trace, ramp and shared
prefixes with their parameters) is recorded with the sweep and shown on the comparison."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from benchlib.loadgen.settings import LoadSettings
from benchmarks.sweeps.models import Sweep
from hosts.models import ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep

pytestmark = pytest.mark.django_db


def test_each_workload_is_said_in_words_with_its_parameters() -> None:
    trace = LoadSettings(requests_per_level=5, trace="m.jsonl", trace_speed=10.0,
                         trace_start=30.0, trace_duration=60.0)  # fmt: skip
    assert trace.workload() == "trace m.jsonl (mooncake) at 10x, from 30 s for 60 s"
    ramp = LoadSettings(requests_per_level=5, request_rate=8.0, ramp="exponential",
                        ramp_start_rate=1.0, prefix_count=4, prefix_tokens=256,
                        prefix_share=0.5)  # fmt: skip
    assert ramp.workload() == (
        "synthetic prompts · exponential ramp from 1 to 8 req/s (10 slices) · "
        "4 shared prefixes of 256 tokens on 50% of requests"
    )
    assert LoadSettings(duration=3.0).workload() == "synthetic prompts · closed loop"
    chat = LoadSettings(duration=3.0, api="chat", session_turns=4, think_time=2.0)
    assert chat.workload() == (
        "synthetic prompts · closed loop · sessions of 4 turns (32-token follow-ups, "
        "2 s think time)"
    )


def test_the_comparison_shows_each_sweeps_workload(
    client: Client, operator: Any, make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    base = make_sweep(make_profile(name="base"), {1: 90, 4: 300}, tmp=tmp_path)
    spec = make_sweep(make_profile(name="spec", speculative=True), {1: 110, 4: 320}, tmp=tmp_path)
    load = LoadSettings(requests_per_level=40, prefix_count=2, prefix_tokens=128).to_stored()
    Sweep.objects.filter(pk__in=[base.pk, spec.pk]).update(load=load)
    client.force_login(operator)
    body = client.get(f"/compare/?sweeps={base.pk}&sweeps={spec.pk}").content.decode()
    shown = 'data-testid="workload">synthetic prompts · closed loop · 2 shared prefixes of 128'
    assert body.count(shown) == 2
