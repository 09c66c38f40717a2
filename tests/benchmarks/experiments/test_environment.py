"""The environment record of a run and the differences between arms beyond their launch."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from benchmarks.experiments import recording, services
from benchmarks.experiments.environment import (
    RunRecord,
    engine_version,
    experiment_environment_differences,
    model_paths,
    record_differences,
    run_environment_record,
    specdash_version,
)
from benchmarks.sweeps.models import Sweep
from hosts.models import ServerProfile
from tests.benchmarks.experiments.constructed import make_sweep

SIM_BIN = Path(__file__).resolve().parents[3] / "benchlib" / "simulator" / "bin"
FIELDS = "index,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.limit"


def _smi_details(tmp_path: Path) -> str:
    """The GPU query the agent's probe runs, answered by the simulator's nvidia-smi."""
    env = {"PATH": f"{SIM_BIN}:/usr/bin:/bin", "SPECDASH_SIM_STATE_DIR": str(tmp_path / "gpu"),
           "SPECDASH_SIM_GPU_COUNT": "2"}  # fmt: skip
    argv = ["nvidia-smi", f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout


def test_model_paths_come_from_each_engines_flags() -> None:
    assert model_paths(["python", "-m", "sglang.launch_server", "--model-path", "/m/base",
                        "--speculative-draft-model-path", "/m/eagle"]) == ["/m/base", "/m/eagle"]  # fmt: skip
    assert model_paths(["vllm", "serve", "/m/qwen", "--port", "8000"]) == ["/m/qwen"]
    assert model_paths(["llama-server", "-m", "a.gguf", "-md", "d.gguf", "--model=a.gguf"]) == [
        "a.gguf",
        "d.gguf",
    ]
    assert model_paths(["vllm", "serve", "--help"]) == []


def test_the_engine_version_is_what_the_server_said_about_itself() -> None:
    assert engine_version({"version": {"version": "0.33.0"}}) == "version: 0.33.0"
    assert engine_version({"server_info": {"version": "0.5.23"}}) == "server_info: 0.5.23"
    assert engine_version({"props": {"build_info": "b6000-0c1e570"}}) == "props: b6000-0c1e570"
    assert engine_version({}) is None


def test_specdash_version_names_the_checkout() -> None:
    described = subprocess.run(
        ["git", "describe", "--always", "--dirty", "--tags"],
        capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[3],
    ).stdout.strip()  # fmt: skip
    assert specdash_version() == described


def _record(tmp_path: Path, **probe: Any) -> RunRecord:
    sweep_env = {"instance": {"launch_argv": ["sim", "--model", "/m/a"], "env": {"HF_TOKEN": "***"},
                              "host": "local", "server_info": {"version": {"version": "1.0"}}}}  # fmt: skip
    base_probe = {"gpu_details": _smi_details(tmp_path), "driver_version": "580.1",
                  "cuda_version": "13.0", "load_avg": [0.5, 0.4, 0.3], "engines": {},
                  "files": [{"path": "/m/a", "kind": "file", "size": 10, "mtime": 1.0,
                             "sha256": "ab" * 32}]}  # fmt: skip
    return run_environment_record(
        sweep_environment=sweep_env, probe={**base_probe, **probe}, gpu_ids=[1]
    )


def test_a_record_holds_version_launch_files_gpus_load_and_specdash(tmp_path: Path) -> None:
    record = _record(tmp_path)
    assert record["engine_version"] == "version: 1.0"
    assert record["argv"] == ["sim", "--model", "/m/a"] and record["env"] == {"HF_TOKEN": "***"}
    assert record["model_files"][0]["sha256"] == "ab" * 32
    (gpu,) = record["gpus"]  # only the server's GPU 1
    assert gpu["index"] == 1 and gpu["name"] and gpu["driver_version"]
    assert (gpu["clocks_max_sm_mhz"], gpu["power_limit_w"]) == ("1980", "600.00")
    assert record["load_avg"] == [0.5, 0.4, 0.3]
    assert record["specdash_version"] == specdash_version()
    assert record_differences(record, _record(tmp_path)) == []


def test_differences_beyond_the_launch_are_named_and_the_launch_is_not(tmp_path: Path) -> None:
    a = _record(tmp_path)
    b: dict[str, Any] = {
        **_record(tmp_path, driver_version="575.0"),
        "argv": ["sim", "--other"],
        "env": {},
    }
    b["engine_version"] = "version: 1.1"
    b["gpus"] = [{**b["gpus"][0], "power_limit_w": "400.00", "clocks_sm_mhz": "1000"}]
    b["model_files"] = [{**b["model_files"][0], "mtime": 2.0}]
    b["load_avg"] = [9.0, 9.0, 9.0]
    lines = record_differences(a, b)
    assert lines[0] == "engine version: 'version: 1.0' vs 'version: 1.1'"
    assert lines[1] == "GPU driver: '580.1' vs '575.0'"
    assert lines[2].startswith("GPUs (name, max SM clock, power limit):") and "400.00" in lines[2]
    assert lines[3].startswith("model file /m/a changed:")
    assert len(lines) == 4  # argv, env, the current clock and the load are not differences


@pytest.mark.django_db
def test_the_comparison_says_when_arms_differ_in_more_than_their_launch(
    make_profile: Callable[..., ServerProfile], tmp_path: Path
) -> None:
    base, spec = make_profile(name="base"), make_profile(name="eagle", speculative=True)
    experiment = services.experiment_create(
        profiles=[base, spec], levels=[1], load={"requests_per_level": 10}
    )
    same = _record(tmp_path)
    upgraded = {**same, "engine_version": "version: 1.1"}
    for step in experiment.steps.select_related("arm").order_by("index"):
        sweep = make_sweep(base if step.arm.label == "A" else spec, {1: 100.0}, tmp=tmp_path,
                           step=step)  # fmt: skip
        record = upgraded if (step.arm.label, step.repeat) == ("B", 1) else same
        Sweep.objects.filter(pk=sweep.pk).update(environment={"records": [record]})
    assert experiment_environment_differences(experiment_id=experiment.pk) == {
        "B": ["engine version: 'version: 1.0' vs 'version: 1.1'"]
    }
    result = recording.experiment_store_comparison(experiment_id=experiment.pk)
    assert result["environment_differences"] == {
        "B": ["engine version: 'version: 1.0' vs 'version: 1.1'"]
    }
