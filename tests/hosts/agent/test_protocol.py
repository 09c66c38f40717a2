from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hosts import agent as agent_pkg
from hosts.agent import AGENT_SOURCE, AgentProtocolError, agent_argv, parse_agent_output

from .helpers import run_agent


def _supervisor_source() -> str:
    for node in ast.parse(AGENT_SOURCE).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == (
            "_SUPERVISOR_SOURCE"
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, str)
            return value
    raise AssertionError("no _SUPERVISOR_SOURCE in the agent")


def test_agent_and_supervisor_parse_as_python_3_8() -> None:
    ast.parse(AGENT_SOURCE, feature_version=(3, 8))
    ast.parse(_supervisor_source(), feature_version=(3, 8))


def test_agent_imports_only_the_standard_library() -> None:
    imported: set[str] = set()
    for source in (AGENT_SOURCE, _supervisor_source()):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                imported.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names)


def test_markers_match_the_agent() -> None:
    namespace: dict[str, object] = {}
    exec(compile(AGENT_SOURCE, "specdash_agent.py", "exec"), namespace)
    assert namespace["BEGIN_MARKER"] == agent_pkg.BEGIN_MARKER
    assert namespace["RESULT_MARKER"] == agent_pkg.RESULT_MARKER
    assert namespace["MARKER_VAR"] == agent_pkg.MARKER_VAR


def test_agent_argv_puts_the_json_in_one_argument() -> None:
    argv = agent_argv("stop", {"run_id": "r 1; rm -rf /", "pid": 3})
    assert argv == ["python3", "-", "stop", '{"pid":3,"run_id":"r 1; rm -rf /"}']


def test_parse_returns_the_result_object() -> None:
    out = 'noise\nSPECDASH-BEGIN\nmore noise\nSPECDASH-RESULT {"ok": true, "x": 1}\n'
    assert parse_agent_output(out) == {"ok": True, "x": 1}


def test_missing_begin_means_a_hop_failed() -> None:
    with pytest.raises(AgentProtocolError) as info:
        parse_agent_output("", "ssh: connect to host gpu1 port 22: Connection refused\n")
    assert info.value.stage == "begin"
    assert "Connection refused" in str(info.value)


def test_missing_result_means_the_agent_crashed_and_shows_the_tails() -> None:
    with pytest.raises(AgentProtocolError) as info:
        parse_agent_output("SPECDASH-BEGIN\npartial output\n", "Killed\n")
    assert info.value.stage == "result"
    assert "partial output" in str(info.value)
    assert "Killed" in str(info.value)


def test_result_that_is_not_json_is_a_protocol_error() -> None:
    with pytest.raises(AgentProtocolError) as info:
        parse_agent_output("SPECDASH-BEGIN\nSPECDASH-RESULT {not json\n")
    assert info.value.stage == "json"


def test_unknown_command_is_an_answer_not_a_crash() -> None:
    run = run_agent("frobnicate", {})
    assert run.returncode == 0
    assert run.stdout.splitlines()[0] == "SPECDASH-BEGIN"
    assert run.result["ok"] is False
    assert "unknown command" in run.result["error"]


def test_bad_arguments_are_refused_with_a_message() -> None:
    assert "run_id is required" in run_agent("members", {}).result["error"]
    assert "run_id must be" in run_agent("members", {"run_id": "a b"}).result["error"]
    assert (
        "argv"
        in run_agent("launch", {"run_id": "x", "argv": [], "run_dir": "/tmp/x"}).result["error"]
    )


def test_unexpected_exception_reports_a_traceback() -> None:
    run = run_agent("verify", {"run_id": "x", "gpus": [0], "baseline_gpu_mem_mb": {"zero": 1}})
    assert run.returncode == 0
    assert run.result["ok"] is False
    assert "ValueError" in run.result["error"]
    assert "Traceback" in run.result["traceback"]


def test_probe_reports_the_host() -> None:
    result = run_agent("probe", {}).result
    assert result["ok"] is True
    assert result["python"].count(".") == 2
    assert result["uid"] >= 0
    assert isinstance(result["container"]["detected"], bool)
    assert "sglang" in result["engines"][result["executable"]]


def test_probe_reports_gpus_driver_and_cuda_versions_from_nvidia_smi(tmp_path: Path) -> None:
    sim_bin = Path(__file__).resolve().parents[3] / "benchlib" / "simulator" / "bin"
    env = {
        **os.environ,
        "PATH": f"{sim_bin}:{os.environ['PATH']}",
        "SPECDASH_SIM_STATE_DIR": str(tmp_path / "gpu"),
        "SPECDASH_SIM_GPU_COUNT": "2",
    }
    smi = run_agent("probe", {}, env=env).result["nvidia_smi"]
    assert smi["available"] is True
    assert [g.split(":")[0] for g in smi["gpus"]] == ["GPU 0", "GPU 1"]
    # The versions are read from nvidia-smi's own header, as an operator reads them.
    header = subprocess.run(
        ["nvidia-smi"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert f"Driver Version: {smi['driver_version']}" in header
    assert f"CUDA Version: {smi['cuda_version']}" in header
    assert smi["driver_version"] and smi["cuda_version"]


def test_probe_reports_the_load_gpu_clocks_and_power_limit_and_the_model_files(
    tmp_path: Path,
) -> None:
    sim_bin = Path(__file__).resolve().parents[3] / "benchlib" / "simulator" / "bin"
    env = {
        **os.environ,
        "PATH": f"{sim_bin}:{os.environ['PATH']}",
        "SPECDASH_SIM_STATE_DIR": str(tmp_path / "gpu"),
        "SPECDASH_SIM_GPU_COUNT": "2",
    }
    small = tmp_path / "draft.gguf"
    small.write_bytes(b"GGUF" + bytes(1000))
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    (model_dir / "weights.safetensors").write_bytes(bytes(5000))
    files = [str(small), str(model_dir), str(tmp_path / "absent")]
    result = run_agent("probe", {"files": files}, env=env).result
    load = result["load_avg"]
    assert len(load) == 3 and all(x >= 0 for x in load)
    lines = result["nvidia_smi"]["details"].splitlines()
    name = "NVIDIA RTX PRO 6000 Blackwell Server Edition"  # the stand-in's default GPU
    assert [line.split(", ")[:2] for line in lines] == [["0", name], ["1", name]]
    # index, name, driver, clocks.sm, clocks.mem, clocks.max.sm, power.limit
    assert lines[0].split(", ")[5:] == ["1980", "600.00"]
    by_path = {f["path"]: f for f in result["files"]}

    assert by_path[str(small)] == {
        "path": str(small), "kind": "file", "size": 1004, "mtime": small.stat().st_mtime,
        "sha256": hashlib.sha256(small.read_bytes()).hexdigest(),
    }  # fmt: skip
    assert by_path[str(model_dir)]["kind"] == "dir"
    assert (by_path[str(model_dir)]["size"], by_path[str(model_dir)]["files"]) == (5002, 2)
    assert "sha256" not in by_path[str(model_dir)]
    assert by_path[str(tmp_path / "absent")]["kind"] == "missing"
    refused = run_agent("probe", {"files": "x"}).result
    assert refused["ok"] is False and "files must be a list" in refused["error"]
