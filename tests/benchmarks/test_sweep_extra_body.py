"""A sweep asks the server for each request's speculative figures when its engine can say them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks.sweeps import recording, services
from benchmarks.sweeps.runner import loadgen_argv
from benchmarks.sweeps.split import Shard, shard_argv
from hosts.models import ServerInstance
from tests.benchmarks.conftest import load

pytestmark = pytest.mark.django_db


def _extra_body(argv: list[str]) -> dict[str, Any] | None:
    if "--extra-body" not in argv:
        return None
    value = json.loads(argv[argv.index("--extra-body") + 1])
    assert isinstance(value, dict)
    return value


def _plan(make_ready_instance: Callable[..., ServerInstance], engine: str) -> recording.SweepPlan:
    instance = make_ready_instance(engine=engine, served_model_name="m")
    sweep = services.sweep_create(instance=instance, levels=[1, 2], load=load())
    plan = recording.sweep_begin(sweep_id=sweep.pk)
    assert plan is not None
    return plan


def _argv(plan: recording.SweepPlan, tmp_path: Path, load: dict[str, Any]) -> list[str]:
    return loadgen_argv(
        base_url=plan.base_url, model="m", levels=plan.levels, load=load,
        records_path=tmp_path / "r.jsonl", engine=plan.engine,
    )  # fmt: skip


@pytest.mark.parametrize("engine", ["sglang", "simulator"])
def test_a_sweep_on_sglang_or_the_simulator_asks_for_the_spec_details(
    make_ready_instance: Callable[..., ServerInstance], tmp_path: Path, engine: str
) -> None:
    plan = _plan(make_ready_instance, engine)
    assert plan.engine == engine
    assert _extra_body(_argv(plan, tmp_path, plan.load)) == {"return_spec_tokens_details": True}
    # a level split into several load-generator processes asks the same
    shard = Shard(index=0, concurrency=2, requests=4, records_path=tmp_path / "s.jsonl")
    argv = shard_argv(
        base_url=plan.base_url, model="m", load=plan.load, shard=shard, start_at=None,
        run_id="r", engine=plan.engine,
    )  # fmt: skip
    assert _extra_body(argv) == {"return_spec_tokens_details": True}


@pytest.mark.parametrize("engine", ["vllm", "llamacpp"])
def test_a_sweep_on_vllm_or_llamacpp_sends_no_extra_body(
    make_ready_instance: Callable[..., ServerInstance], tmp_path: Path, engine: str
) -> None:
    plan = _plan(make_ready_instance, engine)
    assert _extra_body(_argv(plan, tmp_path, plan.load)) is None


def test_the_native_generate_api_is_not_asked(
    make_ready_instance: Callable[..., ServerInstance], tmp_path: Path
) -> None:
    plan = _plan(make_ready_instance, "sglang")
    assert _extra_body(_argv(plan, tmp_path, {**plan.load, "api": "generate"})) is None


def test_a_user_extra_body_is_merged_and_its_fields_win(
    make_ready_instance: Callable[..., ServerInstance], tmp_path: Path
) -> None:
    plan = _plan(make_ready_instance, "sglang")
    user = {"return_spec_tokens_details": False, "top_k": 5}
    assert _extra_body(_argv(plan, tmp_path, {**plan.load, "extra_body": user})) == user
    vllm = _plan(make_ready_instance, "vllm")
    assert _extra_body(_argv(vllm, tmp_path, {**vllm.load, "extra_body": {"top_k": 5}})) == {
        "top_k": 5
    }
