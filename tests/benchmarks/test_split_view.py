from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from benchmarks.sweeps import services
from benchmarks.sweeps.models import LevelState, SweepLevel
from tests.benchmarks.conftest import load


@pytest.mark.django_db
def test_the_sweep_page_shows_a_split_levels_shards_and_flags_the_one_that_fell_behind(
    client: Client, viewer: Any, ready_instance: Any
) -> None:
    sweep = services.sweep_create(instance=ready_instance, levels=[8], load=load())
    shards = [
        {"index": 0, "concurrency": 4, "status": "completed", "requests_ok": 40, "output_tok_s": 400.0,
         "per_stream_tok_s": 100.0, "achieved_concurrency": 3.98, "start_lag_s": 0.01, "behind": []},
        {"index": 1, "concurrency": 4, "status": "completed", "requests_ok": 20, "output_tok_s": 200.0,
         "per_stream_tok_s": 50.0, "achieved_concurrency": 3.1, "start_lag_s": 0.9,
         "behind": ["started 0.90 s late"]},
    ]  # fmt: skip
    SweepLevel.objects.create(
        sweep=sweep, index=0, concurrency=8, state=LevelState.COMPLETED,
        summary={"split": {"shards": shards, "behind": [1]}},
    )  # fmt: skip
    client.force_login(viewer)
    page = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert "split over 2 load-generator processes" in page
    assert page.count('data-testid="shard-behind"') == 2
    assert "started 0.90 s late" in page
