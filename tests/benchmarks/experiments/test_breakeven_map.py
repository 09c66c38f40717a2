"""Map experiments force the acceptance per engine (the simulator's flag, vLLM's synthetic
rejection sampling) against speculation off first; engines without a way say so; the forced
value and the server configuration are read back from a profile's argv."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import pytest
from django.core.exceptions import ValidationError

from benchmarks.experiments import breakeven
from benchmarks.experiments.models import ExperimentArm
from hosts.models import Engine, ServerProfile

pytestmark = pytest.mark.django_db

SIM = [sys.executable, "-m", "benchlib.simulator", "--profile", "eagle3", "--port", "9241"]
VLLM_SPEC = {"method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 3}
VLLM = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m/target",
        "--port", "9242", "--speculative-config", json.dumps(VLLM_SPEC)]  # fmt: skip
LOAD = {"requests_per_level": 4, "max_tokens": 8}


def _arm_argv(experiment_id: int) -> list[list[str]]:
    arms = ExperimentArm.objects.filter(experiment_id=experiment_id).order_by("position")
    return [list(a.profile.launch_argv) for a in arms.select_related("profile")]


def test_a_vllm_map_runs_off_first_then_each_forced_acceptance_by_synthetic_sampling(
    make_profile: Callable[..., ServerProfile],
) -> None:
    base = make_profile(engine=Engine.VLLM, launch_argv=VLLM, speculative=True, port=9242)
    experiment = breakeven.map_create(
        base=base, acceptances=[3.5, 1.5, 2.5], levels=[1, 2, 4], load=LOAD, user=None
    )
    argvs = _arm_argv(experiment.pk)
    assert "--speculative-config" not in argvs[0]  # the reference: speculation off
    forced = []
    for argv in argvs[1:]:
        config = json.loads(argv[argv.index("--speculative-config") + 1])
        assert config["rejection_sample_method"] == "synthetic"
        assert {k: config[k] for k in VLLM_SPEC} == VLLM_SPEC  # the drafter as the base's
        forced.append(breakeven.forced_acceptance(Engine.VLLM, argv))
        assert breakeven.configuration_key(Engine.VLLM, argv) == breakeven.configuration_key(
            Engine.VLLM, VLLM
        )
    assert forced == [1.5, 2.5, 3.5]
    assert breakeven.forced_acceptance(Engine.VLLM, VLLM) is None  # standard sampling
    assert breakeven.MAP_TAG in experiment.tags
    assert experiment.repeats == 2  # the decision object's default protocol


def test_a_simulator_map_forces_the_accept_length_flag(
    make_profile: Callable[..., ServerProfile],
) -> None:
    base = make_profile(launch_argv=SIM, speculative=True, port=9241)
    experiment = breakeven.map_create(
        base=base, acceptances=[2.0, 3.0], levels=[1, 4], load=LOAD, user=None
    )
    argvs = _arm_argv(experiment.pk)
    assert [breakeven.forced_acceptance(Engine.SIMULATOR, a) for a in argvs] == [None, 2.0, 3.0]
    # A workload profile of the same server (its own categories, another port) places on it.
    workload = [*SIM[:-1], "9243", "--category-accept-length", "chat=2.5,code=3.5"]
    assert breakeven.configuration_key(Engine.SIMULATOR, workload) == (
        breakeven.configuration_key(Engine.SIMULATOR, argvs[1])
    )
    other = [*SIM, "--spec-steps", "5"]
    assert breakeven.configuration_key(Engine.SIMULATOR, other) != (
        breakeven.configuration_key(Engine.SIMULATOR, argvs[1])
    )


@pytest.mark.parametrize(
    ("engine", "argv", "said"),
    [
        (
            Engine.SGLANG,
            ["python3", "-m", "sglang.launch_server", "--port", "9241"],
            "no option that forces",
        ),
        (Engine.LLAMACPP, ["llama-server", "--port", "9241"], "no option that forces"),
        (Engine.SIMULATOR, [*SIM, "--category-accept-length", "chat=2"], "--category-accept"),
    ],
)
def test_a_map_is_refused_where_the_acceptance_cannot_be_forced(
    make_profile: Callable[..., ServerProfile],
    engine: str,
    argv: list[str],
    said: str,
) -> None:
    base = make_profile(engine=engine, launch_argv=argv, speculative=True, port=9241)
    with pytest.raises(ValidationError) as caught:
        breakeven.map_create(base=base, acceptances=[2.0, 3.0], levels=[1], load=LOAD, user=None)
    assert said in str(caught.value)
