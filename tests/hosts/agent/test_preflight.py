from __future__ import annotations

import os
import platform
import sys

from tests.fixtures.ports import free_port

from .helpers import agent


def _kernel_dumps_bound_sockets() -> bool:
    # sock_diag lists bound-but-not-listening TCP sockets from Linux 6.9 on.
    major, minor = (int(x) for x in platform.release().split(".")[:2])
    return (major, minor) >= (6, 9)


def test_all_clear(lab) -> None:
    result = agent(
        "preflight", {"port": free_port(), "binary": sys.executable, "workdir": str(lab.tmp)}
    )
    assert result["ok"] is True, result
    assert result["problems"] == []
    assert result["port"]["free"] is True
    assert result["binary"]["found"] is True


def test_missing_binary_and_bad_workdir_are_problems(lab) -> None:
    result = agent(
        "preflight",
        {"binary": "/opt/nowhere/sglang-server", "workdir": str(lab.tmp / "missing")},
    )
    assert result["ok"] is False
    assert any("binary not found" in p for p in result["problems"])
    assert any("workdir does not exist" in p for p in result["problems"])
    assert agent("preflight", {"binary": "no-such-binary-anywhere"})["binary"]["found"] is False
    assert agent("preflight", {"binary": "python3"})["binary"]["found"] is True


def test_port_with_a_foreign_listener_is_taken_and_the_holder_named(lab) -> None:
    pid, port = lab.helper("listen")
    result = agent("preflight", {"port": int(port)})
    assert result["ok"] is False
    assert result["port"]["listening"] is True
    assert [h["pid"] for h in result["port"]["holders"]] == [pid]
    assert f"pid {pid}" in result["problems"][0]


def test_port_bound_but_not_listening_is_taken(lab) -> None:
    # vLLM binds its port before loading the model and listens only afterwards.
    pid, port = lab.helper("bind")
    result = agent("preflight", {"port": int(port)})
    assert result["ok"] is False, result
    assert result["port"]["listening"] is False
    assert result["port"]["in_use"] is True
    assert "bound, not listening" in result["problems"][0]
    if _kernel_dumps_bound_sockets():
        assert [h["pid"] for h in result["port"]["holders"]] == [pid]
    else:
        assert "holder unknown" in result["problems"][0]


def test_gpus_unknown_without_nvidia_smi_is_not_a_problem(lab) -> None:
    env = {**os.environ, "PATH": str(lab.tmp)}  # no nvidia-smi there
    result = agent("preflight", {"gpus": [0, 1]}, env=env)
    assert result["ok"] is True, result
    assert result["gpus"]["available"] is False


def test_gpu_above_threshold_is_held(lab) -> None:
    env = lab.fake_nvidia_smi(
        [{"index": 0, "used": 1, "total": 81559}, {"index": 1, "used": 70000, "total": 81559}],
        [],
    )
    result = agent("preflight", {"gpus": [0, 1, 7], "gpu_mem_threshold_mb": 1024}, env=env)
    assert result["ok"] is False
    held = {d["index"]: d["held"] for d in result["gpus"]["devices"]}
    assert held == {0: False, 1: True}
    assert sorted(result["problems"]) == [
        "GPU 1 is in use: 70000 MiB used (threshold 1024 MiB)",
        "GPU 7 not found by nvidia-smi",
    ]
