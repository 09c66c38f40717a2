"""Parameter matrices: a base profile's argv expanded over axes into variant profiles."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from benchlib.simulator.cli import parse_config
from benchmarks.experiments.matrix import matrix_variants
from hosts.models import Engine, ServerProfile

SIM = [sys.executable, "-m", "benchlib.simulator", "--profile", "eagle3"]
SGLANG = ["python3", "-m", "sglang.launch_server", "--model-path", "m",
          "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
          "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
          "--speculative-adaptive"]  # fmt: skip
VLLM_CONFIG = {"method": "eagle3", "model": "d", "num_speculative_tokens": 3}
VLLM = ["vllm", "serve", "m", "--speculative-config", json.dumps(VLLM_CONFIG), "--port", "8000"]


def _argv(profiles: list[ServerProfile]) -> list[list[str]]:
    return [list(p.launch_argv) for p in profiles]


def test_simulator_axis_appends_the_flag_and_names_variants_by_draft_length(
    make_profile: Callable[..., ServerProfile],
) -> None:
    base = make_profile(name="Sim", launch_argv=SIM, speculative=True)
    variants = matrix_variants(user=None, base=base, axes={"--speculative-num-steps": [1, 2, 3, 5]})
    assert [v.name for v in variants] == ["Sim [K=1]", "Sim [K=2]", "Sim [K=3]", "Sim [K=5]"]
    assert _argv(variants) == [[*SIM, "--speculative-num-steps", str(k)] for k in (1, 2, 3, 5)]
    for v in variants:
        assert (v.host_id, v.port, v.engine, v.speculative) == (
            base.host_id, base.port, base.engine, True
        )  # fmt: skip


def test_sglang_axis_replaces_the_value_and_off_drops_every_speculative_flag(
    make_profile: Callable[..., ServerProfile],
) -> None:
    base = make_profile(name="SG", engine=Engine.SGLANG, launch_argv=SGLANG, speculative=True)
    off, k1, k5 = matrix_variants(
        user=None, base=base, axes={"--speculative-num-steps": [1, 5]}, include_off=True
    )
    assert off.name == "SG [off]" and not off.speculative
    assert off.launch_argv == ["python3", "-m", "sglang.launch_server", "--model-path", "m"]
    assert k1.launch_argv[k1.launch_argv.index("--speculative-num-steps") + 1] == "1"
    assert k5.launch_argv[k5.launch_argv.index("--speculative-num-steps") + 1] == "5"
    assert len(k5.launch_argv) == len(SGLANG)


def test_vllm_key_axis_sets_a_key_inside_the_json_flag(
    make_profile: Callable[..., ServerProfile],
) -> None:
    base = make_profile(name="V", engine=Engine.VLLM, launch_argv=VLLM, port=8000, speculative=True)
    variants = matrix_variants(
        user=None,
        base=base,
        axes={"--speculative-config.num_speculative_tokens": [1, 5]},
        include_off=True,
    )
    assert [v.name for v in variants] == ["V [off]", "V [K=1]", "V [K=5]"]
    assert variants[0].launch_argv == ["vllm", "serve", "m", "--port", "8000"]
    for v, k in zip(variants[1:], (1, 5), strict=True):
        config = json.loads(v.launch_argv[v.launch_argv.index("--speculative-config") + 1])
        assert config == {**VLLM_CONFIG, "num_speculative_tokens": k}
        assert v.launch_argv[-2:] == ["--port", "8000"]


def test_simulator_off_variant_runs_the_profile_without_its_drafter(
    make_profile: Callable[..., ServerProfile],
) -> None:
    base = make_profile(name="S", launch_argv=[*SIM, "--speculative-num-steps", "3"])
    (off, _k2) = matrix_variants(user=None, base=base, axes={"--spec-steps": [2]}, include_off=True)
    assert off.launch_argv == [*SIM, "--speculative-num-steps", "0"]
    # The simulator reads that as drafting nothing at every batch size, at the off costs.
    speculation = parse_config(off.launch_argv[3:]).speculation
    assert speculation is not None and speculation.lengths == (0,)
    vllm_base = make_profile(name="SV", launch_argv=[*SIM, "--metrics-style", "vllm"])
    (off_v, _k) = matrix_variants(
        user=None, base=vllm_base, axes={"--spec-steps": [2]}, include_off=True
    )
    argv = off_v.launch_argv
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == {"num_speculative_tokens": 0}
    assert parse_config(argv[3:]).speculation is not None


def test_an_existing_variant_with_the_same_argv_is_reused(
    make_profile: Callable[..., ServerProfile],
) -> None:
    base = make_profile(name="Sim", launch_argv=[*SIM, "--speculative-num-steps", "3"])
    first = matrix_variants(user=None, base=base, axes={"--speculative-num-steps": [1, 3]})
    assert first[1].pk == base.pk  # K=3 is the base itself
    count = ServerProfile.objects.count()
    again = matrix_variants(user=None, base=base, axes={"--speculative-num-steps": [1, 3, 5]})
    assert [p.pk for p in again[:2]] == [p.pk for p in first]
    assert ServerProfile.objects.count() == count + 1


@pytest.mark.parametrize(
    ("axes", "message"),
    [
        ({"--speculative-config.num_speculative_tokens": [1]}, "not in the base argv"),
        ({"--speculative-num-steps": []}, "non-empty list"),
        ({"--speculative-num-steps": [[1, 2]]}, "numbers or strings"),
        ({"--speculative-num-steps": [{"k": 1}]}, "numbers or strings"),
        ({"--speculative-num-steps": [1, 1]}, "repeated"),
        ({"speculative-num-steps": [1]}, "is a flag"),
    ],
)
def test_bad_axes_are_refused_with_a_message(
    make_profile: Callable[..., ServerProfile], axes: dict[str, Any], message: str
) -> None:
    base = make_profile(launch_argv=SIM)
    count = ServerProfile.objects.count()
    with pytest.raises(ValidationError) as caught:
        matrix_variants(user=None, base=base, axes=axes)
    assert message in " ".join(caught.value.messages)
    assert ServerProfile.objects.count() == count
