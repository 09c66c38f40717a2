"""An experiment of three arms on one rate-ramp workload, the adaptive one beside the two
static ones, written straight into the browser dashboard's database (``manage.py shell -c``)
with the per-second figures ``make bench-controller --save`` stored for seed 4 (the
simulator's SGLang adaptive mode and its static arms, measured: data/controller_ramp.json)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.experiments.models import Experiment, ExperimentArm, ExperimentState, ExperimentStep
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepState
from hosts.models import Engine, Host, ServerProfile
from tests.fixtures.ports import free_port

DATA = Path(__file__).with_name("data") / "controller_ramp.json"
LOAD = {"requests_per_level": 300, "request_rate": 30.0, "ramp": "linear",
        "ramp_start_rate": 1.0, "max_tokens": 100, "controller_tracking": True}  # fmt: skip
ARMS = (
    ("static eagle3", ["--profile", "eagle3"]),
    ("adaptive", ["--profile", "eagle3", "--speculative-adaptive"]),
    ("static baseline", ["--profile", "baseline"]),
)


def build() -> str:
    """The experiment's id and the adaptive arm's sweep id, "EXPERIMENT SWEEP"."""
    figures = json.loads(DATA.read_text())
    host = Host.objects.order_by("pk").first()
    assert host is not None
    experiment = Experiment.objects.create(
        name="Adaptive tiers under a rate ramp", levels=[64], load=LOAD,
        state=ExperimentState.COMPLETED,
    )  # fmt: skip
    adaptive_sweep = 0
    for i, (name, flags) in enumerate(ARMS):
        port = free_port()
        profile = ServerProfile.objects.create(
            name=f"Simulated {name} :{port}", engine=Engine.SIMULATOR, host=host,
            launch_argv=[sys.executable, "-m", "benchlib.simulator", *flags, "--port", str(port)],
            port=port, gpu_ids=[], speculative=name != "static baseline",
        )  # fmt: skip
        arm = ExperimentArm.objects.create(
            experiment=experiment, profile=profile, label="ABC"[i], position=i
        )
        step = ExperimentStep.objects.create(experiment=experiment, index=i, arm=arm)
        sweep = Sweep.objects.create(
            name=name, profile=profile, levels=[64], state=SweepState.COMPLETED, load=LOAD,
            experiment_step=step,
        )  # fmt: skip
        SweepLevel.objects.create(
            sweep=sweep, index=0, concurrency=64, state=LevelState.COMPLETED, requests_ok=300,
            summary={"controller": figures[name]},
        )  # fmt: skip
        if name == "adaptive":
            adaptive_sweep = sweep.pk
    return f"{experiment.pk} {adaptive_sweep}"
