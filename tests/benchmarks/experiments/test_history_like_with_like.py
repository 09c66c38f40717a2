"""A profile's history compares runs under the same load only (levels, requests per level,
workload), the latest run's by default, and says what it grouped and what else there is."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from benchmarks.experiments.history import history_load
from benchmarks.sweeps.models import Sweep, SweepLevel
from hosts.models import ServerProfile

pytestmark = pytest.mark.django_db

SHORT = {"requests_per_level": 8, "api": "completions", "input_tokens": 32, "max_tokens": 32}
LONG = {**SHORT, "requests_per_level": 400}


def _sweep(profile: ServerProfile, levels: list[int], load: dict[str, Any], tok_s: float) -> Sweep:
    sweep = Sweep.objects.create(
        profile=profile, levels=levels, load=load, state="completed", name=f"{tok_s}"
    )
    for index, c in enumerate(levels):
        SweepLevel.objects.create(
            sweep=sweep, index=index, concurrency=c, state="completed",
            output_tok_s=tok_s * c, requests_ok=8,
        )  # fmt: skip
    return sweep


def test_the_load_key_separates_what_changes_a_measurement_and_nothing_else() -> None:
    same, _ = history_load(levels=[2, 1], load={**SHORT, "request_timeout": 5})
    assert same == history_load(levels=[1, 2], load=SHORT)[0]
    assert same != history_load(levels=[1, 2], load=LONG)[0]
    assert same != history_load(levels=[1, 2, 4], load=SHORT)[0]
    assert same != history_load(levels=[1, 2], load={**SHORT, "prompt_set": "sharegpt"})[0]
    label = history_load(levels=[1, 2], load=SHORT)[1]
    assert (
        label
        == "C=1, 2; 8 requests per level; completions, synthetic prompts; 32 in / 32 out tokens"
    )


def test_the_history_shows_the_latest_runs_load_and_links_the_others(
    make_profile: Callable[..., ServerProfile], client: Client, viewer: Any
) -> None:
    profile = make_profile()
    old = [_sweep(profile, [1, 2], LONG, 100.0), _sweep(profile, [1, 2], LONG, 101.0)]
    latest = [_sweep(profile, [1, 2, 64], SHORT, 50.0)]
    client.force_login(viewer)
    page = client.get(f"/compare/history/{profile.pk}/").content.decode()
    figure = json.loads(page.split('id="history-figure" type="application/json">')[1]
                        .split("</script>")[0])  # fmt: skip
    # Only the latest load's run is plotted and listed.
    assert len(figure["data"][0]["x"]) == 1
    assert f"#{latest[0].pk}" in page and f"#{old[0].pk}</a>" not in page
    assert "1 of 3 runs" in page
    assert "C=1, 2, 64; 8 requests per level" in page
    link = page.split('data-testid="history-load-link"')[0].rsplit('href="', 1)[1].split('"')[0]
    assert "(2 runs)" in page
    other = client.get(f"/compare/history/{profile.pk}/{link}").content.decode()
    assert "2 of 3 runs" in other and "C=1, 2; 400 requests per level" in other
    assert all(f"#{s.pk}</a>" in other for s in old) and f"#{latest[0].pk}</a>" not in other
