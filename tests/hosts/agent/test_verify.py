from __future__ import annotations

import socket
from typing import Any

from tests.fixtures.ports import free_port
from tests.fixtures.procs import alive

from .helpers import agent, start_time


def _identity(launched: dict[str, Any]) -> dict[str, Any]:
    return {k: launched[k] for k in ("run_id", "pid", "pgid", "sid", "start_time", "run_dir")}


def _gpu(index: int, used: int) -> dict[str, int]:
    return {"index": index, "used": used, "total": 81559}


def test_verify_never_takes_holders_from_nvidia_smi_pids(lab) -> None:
    # Lifecycle case 8: in a container nvidia-smi prints host pids, here innocent processes.
    innocents = [lab.helper("sleep")[0] for _ in range(2)]
    env = lab.fake_nvidia_smi([_gpu(0, 60000)], app_pids=innocents)
    launched = lab.launch_engine("--workers", "2", env={"PATH": env["PATH"]})
    lab.wait_engine(launched, workers=2)
    stopped = agent("stop", {**_identity(launched), "grace_seconds": 5}, env=env)
    assert stopped["clean"] is True
    lab.set_gpus([_gpu(0, 3)], app_pids=innocents)
    verify = agent(
        "verify",
        {
            **_identity(launched),
            "gpus": [0],
            "baseline_gpu_mem_mb": {"0": 0},
            "tolerance_mb": 256,
            "device_dirs": [str(lab.tmp / "dev")],
        },
        env=env,
    )
    assert verify["verdict"] == "stopped", verify["reasons"]
    assert verify["gpu_memory"] == {"0": {"used_mb": 3, "baseline_mb": 0, "ok": True}}
    assert not {h["pid"] for h in verify["holders"]} & set(innocents)
    assert all(alive(pid) for pid in innocents)
    assert not any(
        arg.startswith("--query-compute-apps") for call in lab.nvidia_smi_calls() for arg in call
    )


def test_a_foreign_gpu_holder_makes_the_stop_dirty_and_only_it_can_be_killed(lab) -> None:
    # Lifecycle case 11: every server process is gone, yet GPU 0 is still held.
    dev = lab.tmp / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl"):
        (dev / name).write_text("")
    env = lab.fake_nvidia_smi([_gpu(0, 60000), _gpu(1, 20000)], app_pids=[])
    launched = lab.launch_engine("--workers", "2", "--hold-gpu", str(dev / "nvidia0"))
    lab.wait_engine(launched, workers=2)
    holder, _ = lab.helper("open", str(dev / "nvidia0"))
    neighbour, _ = lab.helper("open", str(dev / "nvidia1"))
    cuda_ctx, _ = lab.helper("open", str(dev / "nvidiactl"))

    only_ours = {"device_dirs": [str(dev)]}  # other simulated hosts may share this machine
    before = agent("verify", {**_identity(launched), "gpus": [0], **only_ours}, env=env)
    assert before["verdict"] == "dirty"
    assert {launched["pid"]} <= {m["pid"] for m in before["members"]}

    stopped = agent("stop", {**_identity(launched), "grace_seconds": 5}, env=env)
    assert stopped["clean"] is True
    assert holder not in stopped["terminated"] + stopped["killed"]

    args = {
        **_identity(launched),
        "gpus": [0],
        "baseline_gpu_mem_mb": {"0": 0},
        "tolerance_mb": 512,
        **only_ours,
    }
    dirty = agent("verify", args, env=env)
    assert dirty["verdict"] == "dirty"
    by_pid = {h["pid"]: h for h in dirty["holders"]}
    assert by_pid[holder]["gpus"] == [0]
    assert by_pid[holder]["counts"] is True
    assert by_pid[holder]["devices"] == [str(dev / "nvidia0")]
    assert by_pid[holder]["start_time"] == start_time(holder)
    assert neighbour not in by_pid  # GPU 1 is not this instance's
    assert by_pid[cuda_ctx]["all_gpus"] is True
    assert by_pid[cuda_ctx]["counts"] is False  # nvidiactl alone: any CUDA process has it
    assert any(f"pid {holder}" in r for r in dirty["reasons"])
    assert any("GPU 0 memory not released" in r for r in dirty["reasons"])
    assert dirty["members"] == []
    anywhere = agent("verify", {**args, "device_dirs": None}, env=env)
    assert holder in {h["pid"] for h in anywhere["holders"]}
    real_devices_only = agent("verify", {**args, "device_dirs": ["/dev"]}, env=env)
    assert holder not in {h["pid"] for h in real_devices_only["holders"]}

    wrong = agent(
        "kill_pids", {"pids": [{"pid": holder, "start_time": by_pid[holder]["start_time"] - 1}]}
    )
    assert wrong["skipped"][0]["pid"] == holder
    assert alive(holder)

    killed = agent(
        "kill_pids",
        {"pids": [{"pid": holder, "start_time": by_pid[holder]["start_time"]}], "wait_seconds": 10},
    )
    assert killed["signalled"] == [holder]
    assert killed["alive"] == []
    assert not alive(holder)
    assert alive(neighbour)
    assert alive(cuda_ctx)

    lab.set_gpus([_gpu(0, 0), _gpu(1, 20000)], app_pids=[])
    clean = agent("verify", args, env=env)
    assert clean["verdict"] == "stopped", clean["reasons"]


def test_verify_without_nvidia_smi_reports_memory_unknown(lab) -> None:
    launched_port = free_port()
    launched = lab.launch_engine("--listen", str(launched_port))
    lab.wait_engine(launched, workers=0)
    assert agent("verify", {**_identity(launched), "port": launched_port})["verdict"] == "dirty"
    agent("stop", {**_identity(launched), "grace_seconds": 5})
    result = agent(
        "verify",
        {
            **_identity(launched),
            "gpus": [0],
            "port": launched_port,
            "device_dirs": [str(lab.tmp / "dev")],
        },
        env={"PATH": str(lab.tmp)},
    )
    assert result["gpu_memory"] == "unknown"
    assert result["verdict"] == "stopped", result["reasons"]


def test_verify_sees_the_port_still_listening(lab) -> None:
    pid, port = lab.helper("listen")
    result = agent("verify", {"run_id": lab.run_id(), "port": int(port)})
    assert result["verdict"] == "dirty"
    assert result["port"]["holders"][0]["pid"] == pid
    assert any(f"port {port} is still listening" in r for r in result["reasons"])


def test_verify_counts_a_port_held_only_by_orphaned_connections_as_free() -> None:
    # The server is gone but a client (a load generator, a metrics scraper) still holds its end of
    # a kept-alive connection: the server's side lingers in FIN_WAIT2 with no process owning it.
    # A plain bind fails, yet a server (SO_REUSEADDR) starts on the port: nothing is left to stop.
    # The kernel's choice of port is safe here: the socket keeps it bound from the start.
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.listen()
    client = socket.create_connection(("127.0.0.1", port))
    try:
        accepted, _ = server.accept()
        accepted.close()
        server.close()
        result = agent("verify", {"run_id": "no-such-run", "port": port})
        assert result["verdict"] == "stopped", result["reasons"]
        assert result["port"]["free"] is True
        assert "FIN_WAIT2" in result["port"]["notes"][0]
    finally:
        client.close()


def test_a_gpu_without_a_level_from_before_the_start_is_not_counted_as_released(lab) -> None:
    # Nothing was compared (no baseline recorded): the answer says so instead of "ok".
    env = lab.fake_nvidia_smi([_gpu(0, 60000), _gpu(1, 10)], app_pids=[])
    launched = lab.launch_engine("--workers", "1")
    lab.wait_engine(launched, workers=1)
    assert agent("stop", {**_identity(launched), "grace_seconds": 5}, env=env)["clean"] is True
    verify = agent(
        "verify",
        {**_identity(launched), "gpus": [0, 1], "baseline_gpu_mem_mb": {"1": 0},
         "device_dirs": [str(lab.tmp / "dev")]},
        env=env,
    )  # fmt: skip
    assert verify["gpu_memory"] == {
        "0": {"used_mb": 60000, "baseline_mb": None, "ok": None},
        "1": {"used_mb": 10, "baseline_mb": 0, "ok": True},
    }
