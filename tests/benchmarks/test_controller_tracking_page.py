"""The controller-tracking section of the sweep and experiment pages: drawn from each level's
stored per-second figures (no recompute on a GET), a Plotly figure per level with the switch
markers, the switches with their cost, and on an experiment the static arm beside the
adaptive one on the same workload."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from django.contrib.auth.models import User
from django.test import Client

from benchlib.stats.controller import controller_figures
from benchlib.stats.controller_types import ControllerFigures
from benchmarks.experiments.models import Experiment, ExperimentArm, ExperimentStep
from benchmarks.sweeps.models import SweepLevel
from benchmarks.sweeps.runner import loadgen_argv
from benchmarks.sweeps.split import Shard, shard_argv
from hosts.models import ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep


def _gauges(tier: float, throughput: float, accept: float = 0.6) -> dict[str, float]:
    return {
        "sglang:spec_num_steps": tier,
        "sglang:spec_accept_length": 1.0 + 3 * accept if tier else 1.0,
        "sglang:spec_accept_rate": accept if tier else 0.0,
        "sglang:gen_throughput": throughput,
    }


# Eight seconds: K=3 at 200 tok/s, the switch to 0 between the 4th and 5th scrape, 500 after.
ADAPTIVE = controller_figures(
    [100.0 + t for t in range(8)],
    [_gauges(3, 200)] * 4 + [_gauges(0, 350)] + [_gauges(0, 500)] * 3,
    opened_at=100.0,
)
STATIC = controller_figures([100.0 + t for t in range(8)], [_gauges(3, 210)] * 8, opened_at=100.0)


def _store(sweep_id: int, concurrency: int, figures: ControllerFigures | None) -> None:
    level = SweepLevel.objects.get(sweep_id=sweep_id, concurrency=concurrency)
    level.summary = {**level.summary, "controller": figures}
    level.save(update_fields=["summary"])


def _figures(body: str) -> list[dict]:
    """Each chart's figure, from the json_script its node names."""
    figures = []
    for figure_id in re.findall(r'data-controller-figure="([^"]+)"', body):
        found = re.search(
            rf'<script id="{figure_id}" type="application/json">(.*?)</script>', body, re.S
        )
        assert found is not None, figure_id
        figures.append(json.loads(found[1]))
    return figures


def test_the_sweep_page_draws_each_tracked_level_with_its_switch_and_cost(
    client: Client, viewer: User, make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    client.force_login(viewer)
    sweep = make_sweep(make_profile(), {4: 200, 16: 500}, tmp=tmp_path, records=False)
    _store(sweep.pk, 16, ADAPTIVE)
    body = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    assert 'data-testid="controller-tracking"' in body
    [figure] = _figures(body)  # the level without figures has no chart
    names = [trace["name"] for trace in figure["data"]]
    assert f"sweep #{sweep.pk}: tok/s" in names and f"sweep #{sweep.pk}: switch" in names
    [marker] = [t for t in figure["data"] if t["name"].endswith(": switch")]
    assert marker["x"] == [3.5] and marker["y"] == [0.0]
    assert "+150.0%" in marker["text"][0]  # 200 -> 500 tok/s, the mixed second left out
    assert [s["x0"] for s in figure["layout"]["shapes"]] == [3.5]
    rows = re.findall(r'data-testid="controller-switch-change">([^<]*)<', body)
    assert rows == ["+150.0%"]


def test_a_flap_from_the_tier_readings_shows_as_one_episode_with_its_cost(
    client: Client, viewer: User, make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    # K=3 throughout the per-second scrapes, but the 50 ms readings saw a flap to 1 from 3.52
    # to 3.62 s: two switches, no whole second between them, costed together.
    readings = [100.0 + i * 0.05 for i in range(160)]
    tiers = [1.0 if 3.52 <= r - 100.0 < 3.62 else 3.0 for r in readings]
    figures = controller_figures(
        [100.0 + t for t in range(8)],
        [_gauges(3, 200)] * 4 + [_gauges(3, 260)] + [_gauges(3, 300)] * 3,
        opened_at=100.0,
        tier_times=readings,
        tiers=tiers,
    )
    client.force_login(viewer)
    sweep = make_sweep(make_profile(), {16: 500}, tmp=tmp_path, records=False)
    _store(sweep.pk, 16, figures)
    body = client.get(f"/sweeps/{sweep.pk}/").content.decode()
    [figure] = _figures(body)
    [marker] = [t for t in figure["data"] if t["name"].endswith(": switch")]
    assert marker["x"] == [3.525, 3.625]
    assert all("one of 2 switches from 3.5 to 3.6 s, costed together" in t for t in marker["text"])
    assert re.findall(r'data-testid="controller-switch-change">([^<]*)<', body) == ["+50.0%"] * 2
    assert body.count('data-testid="controller-switch-episode"') == 2


def test_the_experiment_page_puts_the_static_arm_beside_the_adaptive_one(
    client: Client, viewer: User, make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    client.force_login(viewer)
    experiment = Experiment.objects.create(name="adaptive vs static", levels=[16])
    sweeps = {}
    for index, (label, tok_s) in enumerate((("A", 210.0), ("B", 400.0))):
        profile = make_profile()
        arm = ExperimentArm.objects.create(
            experiment=experiment, profile=profile, label=label, position=index
        )
        step = ExperimentStep.objects.create(experiment=experiment, index=index, arm=arm)
        sweeps[label] = make_sweep(profile, {16: tok_s}, tmp=tmp_path, records=False, step=step)
    _store(sweeps["A"].pk, 16, STATIC)
    _store(sweeps["B"].pk, 16, ADAPTIVE)
    body = client.get(f"/experiments/{experiment.pk}/").content.decode()
    [figure] = _figures(body)
    throughput = {t["name"]: t["y"] for t in figure["data"] if t["name"].endswith("tok/s")}
    assert throughput == {"A: tok/s": [210.0] * 8, "B: tok/s": [200.0] * 4 + [350.0] + [500.0] * 3}
    # Only the adaptive arm switched.
    assert [t["name"] for t in figure["data"] if t["name"].endswith("switch")] == ["B: switch"]
    assert body.count('data-testid="controller-switch"') == 1


def test_a_split_level_scrapes_the_server_from_its_first_shard_only(tmp_path: Path) -> None:
    load = {"requests_per_level": 8, "controller_tracking": True}

    def argv(index: int) -> list[str]:
        shard = Shard(index=index, concurrency=2, requests=4, records_path=tmp_path / "s.jsonl")
        return shard_argv(
            base_url="http://127.0.0.1:1", model="m", load=load, shard=shard, start_at=None,
            run_id="r",
        )  # fmt: skip

    assert "--controller-tracking" in argv(0)
    assert "--controller-tracking" not in argv(1)
    # The sweep's own (unsplit) load generator tracks as asked.
    assert "--controller-tracking" in loadgen_argv(
        base_url="http://x", model="m", levels=[1], load=load, records_path=tmp_path / "r"
    )
