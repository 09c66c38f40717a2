"""The levels API carries a reasoning level's per-phase figures as the load generator stored
them: tokens per chunk and per delivery in each phase, with the counts behind them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.benchmarks.test_sweep_phases_page import phase_sweep
from tests.specdash.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def test_the_levels_api_gives_each_phases_tokens_per_chunk(
    as_viewer: ApiClient, make_profile: Any, make_instance: Any
) -> None:
    sweep, phases = phase_sweep(make_instance(make_profile(served_model_name="sim")))
    levels = as_viewer.get(f"/api/v1/sweeps/{sweep.pk}/levels").json()
    plain, reasoning = levels[0]["summary"], levels[1]["summary"]["reasoning"]
    assert "reasoning" not in plain
    assert reasoning["accept_reasoning"] == phases["reasoning"]["accept_reasoning"]
    assert reasoning["accept_reasoning"]["tokens_per_chunk"] == 2.5  # (3 + 2) / 2, per request
    assert reasoning["accept_answer"] == {
        "tokens_per_chunk": 1.0, "tokens_per_delivery": 1.0, "tokens": 6, "chunks": 6,
        "deliveries": 6, "requests": 2,
    }  # fmt: skip
