"""Experiments of variants of one server built directly in the database (no servers run)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from benchmarks.experiments import services
from benchmarks.experiments.models import Experiment
from hosts.models import ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep

VLLM_EAGLE3 = {"method": "eagle3", "model": "org/draft", "num_speculative_tokens": 3}
# A clean crossover: EAGLE-3 well ahead at low load, well behind when saturated.
BASELINE = {1: 92.0, 8: 400.0, 64: 760.0}
EAGLE3 = {1: 150.0, 8: 500.0, 64: 350.0}


def vllm_argv(spec: Mapping[str, object] | None) -> list[str]:
    argv = ["vllm", "serve", "org/model", "--max-num-seqs", "256"]
    return [*argv, "--speculative-config", json.dumps(spec)] if spec is not None else argv


def constructed_experiment(
    make_profile: Callable[..., ServerProfile],
    arms: Sequence[tuple[str, str, list[str], Mapping[int, float]]],
    tmp: Path,
) -> Experiment:
    """One arm per (name, engine, launch argv, tok/s per level), each with one completed sweep."""
    profiles = [
        make_profile(name=name, engine=engine, launch_argv=argv) for name, engine, argv, _ in arms
    ]
    levels = sorted({c for *_, values in arms for c in values})
    # Ten requests per slot at the top level: the single-run interval (batch means over time
    # windows) needs at least three windows of C requests, and the drain of a few requests per
    # slot moves a level's figure by several per cent.
    requests = max(40, 10 * max(levels))
    experiment = services.experiment_create(
        profiles=profiles, levels=levels, load={"requests_per_level": requests}, repeats=1
    )
    figures = {name: values for name, _, _, values in arms}
    for i, step in enumerate(experiment.steps.select_related("arm__profile")):
        make_sweep(
            step.arm.profile, figures[step.arm.profile.name], tmp=tmp, step=step, seed=i,
            requests=requests,
        )  # fmt: skip
    return experiment
