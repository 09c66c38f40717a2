"""A break-even map, a placed workload sweep and one check, written straight into the browser
dashboard's database (``manage.py shell -c``) from the simulator's own scheduler on a virtual
clock (seeded): the figures are the simulator model's, without starting any server."""

from __future__ import annotations

import sys

from benchlib.simulator.profiles import get_profile
from benchlib.simulator.virtual import simulate_closed_loop
from benchlib.stats.breakeven import breakeven_map, place
from benchlib.stats.decision import Arm
from benchlib.stats.decision_rule import decide_curves
from benchlib.stats.types import Curve, LevelSample
from benchmarks.experiments import breakeven
from benchmarks.experiments.matrix import matrix_variants
from benchmarks.experiments.models import BreakevenCheck, Experiment, ExperimentArm, ExperimentState
from benchmarks.sweeps.models import LevelState, Sweep, SweepLevel, SweepState
from hosts.models import Engine, Host, ServerProfile
from tests.fixtures.ports import free_port

LEVELS = (1, 2, 4, 8, 16)
FORCED = (2.0, 2.5, 3.0, 3.5, 4.0)
CATEGORIES = {"chat": 2.7, "code": 3.6}


def _curve(name: str, accept: float | None, seeds: tuple[int, int]) -> Curve:
    profile = get_profile("baseline") if accept is None else get_profile("eagle3")
    if accept is not None:
        profile = profile.replace(accept_length=accept)
    levels = [
        LevelSample.from_repeats(c, [
            simulate_closed_loop(profile, c, prompt_tokens=32, output_tokens=256,
                                 duration_s=120.0, warmup_s=5.0, seed=s).output_tok_s
            for s in seeds
        ])
        for c in LEVELS
    ]  # fmt: skip
    return Curve(name, levels, speculative=accept is not None)


def _profile(host: Host, *extra: str) -> ServerProfile:
    port = free_port()
    argv = [sys.executable, "-m", "benchlib.simulator", "--profile", "eagle3",
            "--port", str(port), *extra]  # fmt: skip
    return ServerProfile.objects.create(
        name=f"Simulated EAGLE-3{' (categories)' if extra else ''} :{port}",
        engine=Engine.SIMULATOR, host=host, launch_argv=argv, port=port, gpu_ids=[],
        speculative=True,
    )  # fmt: skip


def _experiment(name: str, profiles: list[ServerProfile], tags: list[str]) -> Experiment:
    experiment = Experiment.objects.create(
        name=name, levels=list(LEVELS), load={"requests_per_level": 16},
        state=ExperimentState.COMPLETED, tags=tags,
    )  # fmt: skip
    for i, profile in enumerate(profiles):
        ExperimentArm.objects.create(
            experiment=experiment, profile=profile, label="ABCDEFGH"[i], position=i
        )
    return experiment


def build() -> str:
    """The map experiment's and the workload sweep's ids, "MAP SWEEP"."""
    host = Host.objects.order_by("pk").first()
    assert host is not None
    base = _profile(host)
    axes = {"--accept-length": list(FORCED)}
    profiles = matrix_variants(base=base, axes=axes, include_off=True, user=None)
    mapped = _experiment("Break-even map: simulated EAGLE-3", profiles, [breakeven.MAP_TAG])
    baseline = _curve("off", None, (1, 2))
    verdicts, columns = [], []
    for i, (arm, accept) in enumerate(zip("BCDEF", FORCED, strict=True)):
        decision = decide_curves(
            baseline, _curve(profiles[i + 1].name, accept, (10 + i, 20 + i)),
            arms=(Arm(profiles[0].name), Arm(profiles[i + 1].name, speculative=True)),
        )  # fmt: skip
        columns.append((accept, decision))
        verdicts.append({"candidate": arm, "candidate_name": profiles[i + 1].name,
                         "decision": decision.to_dict()})  # fmt: skip
    mapped.comparison = {"reference": "A", "verdicts": verdicts}
    mapped.save(update_fields=["comparison"])

    workload = _profile(host, "--category-accept-length",
                        ",".join(f"{k}={v}" for k, v in CATEGORIES.items()))  # fmt: skip
    sweep = Sweep.objects.create(
        name="Mixed chat and code", profile=workload, levels=list(LEVELS),
        state=SweepState.COMPLETED, load={"prompt_set": "mixed", "requests_per_level": 16},
    )  # fmt: skip
    for index, c in enumerate(LEVELS):
        by_category = {
            name: {"requests": 8, "accept_length": accept} for name, accept in CATEGORIES.items()
        }
        SweepLevel.objects.create(
            sweep=sweep, index=index, concurrency=c, state=LevelState.COMPLETED,
            output_tok_s=100.0 * c, requests_ok=16,
            summary={"acceptance": {"by_category": by_category}},
        )  # fmt: skip

    # One check: chat's own A/B (its acceptance alone, other seeds), as a verification stores it.
    bmap = breakeven_map(columns)
    (chat,) = place(bmap, {"chat": dict.fromkeys(LEVELS, CATEGORIES["chat"])})
    measured = decide_curves(baseline, _curve("chat", CATEGORIES["chat"], (31, 32)))
    verification = _experiment(
        f"Check of map {mapped.pk}: chat", [profiles[0], workload], [breakeven.CHECK_TAG]
    )
    verification.comparison = {"reference": "A", "verdicts": [{"decision": measured.to_dict()}]}
    verification.save(update_fields=["comparison"])
    BreakevenCheck.objects.create(
        map_experiment=mapped, verification=verification, category="chat",
        source=f"sweep {sweep.pk}", predicted=chat.to_dict(),
    )  # fmt: skip
    return f"{mapped.pk} {sweep.pk}"
