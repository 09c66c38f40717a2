from __future__ import annotations

import os
import signal
import stat
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.fixtures.procs import alive, fd_targets

from .helpers import (
    FAKE_ENGINE,
    agent,
    environ,
    pids_with_marker,
    ppid_of,
    run_agent,
    start_time,
    stat_fields,
    wait_for,
)


def _status(launched: dict[str, Any], **extra: object) -> dict[str, Any]:
    return agent(
        "status",
        {
            "run_id": launched["run_id"],
            "pid": launched["pid"],
            "start_time": launched["start_time"],
            "run_dir": launched["run_dir"],
            **extra,
        },
    )


def _exit_code(launched: dict[str, Any]) -> int:
    def recorded() -> dict[str, Any] | None:
        status = _status(launched)
        return status if status["exit_code"] is not None else None

    return int(wait_for(recorded, timeout=60, what="exit_code")["exit_code"])


def test_launch_returns_at_once_and_leaves_the_server_running_detached(lab) -> None:
    run_id = lab.run_id()
    run_dir = lab.tmp / "run"
    state = lab.tmp / "state"
    state.mkdir()
    run = run_agent(
        "launch",
        {
            "run_id": run_id,
            "argv": [sys.executable, str(FAKE_ENGINE), "--state-dir", str(state), "--workers", "1"],
            "env": {"ENGINE_FLAVOUR": "fake"},
            "workdir": str(lab.tmp),
            "run_dir": str(run_dir),
            "port": 30000,
        },
    )
    result = run.result
    assert result["ok"] is True, result
    # The agent exited (communicate() saw EOF: no fd kept the pipes open) long before the
    # server would; the deadline is generous for a loaded machine, the server runs for hours.
    assert run.elapsed < 20
    pid = result["pid"]
    assert alive(pid)
    assert result["start_time"] == start_time(pid)
    assert result["pgid"] == pid
    assert result["sid"] == os.getsid(pid) != os.getsid(0)
    assert result["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert result["cmdline"][1] == str(FAKE_ENGINE)
    assert result["already_running"] is False
    supervisor = result["supervisor_pid"]
    assert ppid_of(pid) == supervisor
    assert ppid_of(supervisor) != run.agent_pid
    # Nothing of the agent's stdin/stdout/stderr reached the server.
    assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
    assert os.readlink(f"/proc/{pid}/fd/1") == str(run_dir / "server.log")
    assert os.readlink(f"/proc/{pid}/fd/2") == str(run_dir / "server.log")
    for proc in (pid, supervisor):
        for target in fd_targets(proc):
            assert "pipe:" not in target, (proc, target)
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    # The marker reaches the server and the supervisor; setproctitle must not eat it.
    for proc in (pid, supervisor):
        assert f"SPECDASH_RUN_ID={run_id}" in environ(proc)
        assert "SPT_NOENV=1" in environ(proc)
    assert "ENGINE_FLAVOUR=fake" in environ(pid)
    lab.wait_engine({"state_dir": state}, workers=1)
    assert "The server is fired up" in "\n".join(_status(result)["log"]["lines"])


def test_retrying_a_launch_reconciles_instead_of_starting_a_second_server(lab) -> None:
    first = lab.launch_engine("--workers", "1")
    lab.wait_engine(first, workers=1)
    again = agent(
        "launch",
        {
            "run_id": first["run_id"],
            "argv": [sys.executable, str(FAKE_ENGINE), "--state-dir", str(lab.tmp)],
            "run_dir": first["run_dir"],
        },
    )
    assert again["ok"] is True
    assert again["already_running"] is True
    assert again["pid"] == first["pid"]
    assert again["start_time"] == first["start_time"]
    # Supervisor, server, one worker: still exactly one instance.
    assert len(pids_with_marker(first["run_id"])) == 3


def test_live_leftovers_without_a_server_refuse_a_launch(lab) -> None:
    launched = lab.launch_engine("--workers", "1")
    lab.wait_engine(launched, workers=1)
    os.kill(launched["pid"], 9)
    wait_for(lambda: not alive(launched["pid"]), what="server gone")
    again = agent(
        "launch",
        {"run_id": launched["run_id"], "argv": ["true"], "run_dir": launched["run_dir"]},
    )
    assert again["ok"] is False
    assert "stop it first" in again["error"]


def test_server_that_exits_at_once_shows_exit_code_and_log_tail(lab) -> None:
    launched = lab.launch_engine("--exit-code", "1")
    assert _exit_code(launched) == 1
    status = _status(launched)
    assert status["alive"] is False
    assert "error: model path does not exist" in status["log"]["lines"]
    assert any("exited with code 1" in line for line in status["log"]["lines"])


def test_supervisor_records_a_later_exit_code(lab) -> None:
    launched = lab.launch_engine("--exit-after", "0.5")
    assert _exit_code(launched) == 3
    assert (Path(launched["run_dir"]) / "exit_code").read_text().strip() == "3"


def test_missing_binary_at_launch_fails_with_127_and_the_reason(lab) -> None:
    run_id = lab.run_id()
    run_dir = lab.tmp / "run"
    result = agent(
        "launch", {"run_id": run_id, "argv": ["/opt/nowhere/server"], "run_dir": str(run_dir)}
    )
    assert result["ok"] is False
    assert "could not start" in result["error"]
    assert result["exit_code"] == 127
    assert (run_dir / "exit_code").read_text().strip() == "127"
    assert any("/opt/nowhere/server" in line for line in result["log_tail"])
    assert pids_with_marker(run_id) == []


def test_bad_workdir_at_launch_is_refused(lab) -> None:
    result = agent(
        "launch",
        {
            "run_id": lab.run_id(),
            "argv": [sys.executable, "-c", "pass"],
            "workdir": str(lab.tmp / "missing"),
            "run_dir": str(lab.tmp / "run"),
        },
    )
    assert result["ok"] is False
    assert "workdir does not exist" in result["error"]


def test_sigterm_stop_records_minus_15(lab) -> None:
    launched = lab.launch_engine()
    lab.wait_engine(launched, workers=0)
    stopped = agent(
        "stop",
        {
            "run_id": launched["run_id"],
            "pid": launched["pid"],
            "pgid": launched["pgid"],
            "sid": launched["sid"],
            "start_time": launched["start_time"],
            "run_dir": launched["run_dir"],
        },
    )
    assert stopped["clean"] is True
    assert launched["pid"] in stopped["terminated"]
    assert stopped["killed"] == []
    assert _exit_code(launched) == -15


def test_log_tail_is_bounded(lab) -> None:
    run_dir = lab.tmp / "run"
    run_dir.mkdir()
    (run_dir / "server.log").write_text("".join(f"line {i}\n" for i in range(1000)))
    tail = agent("log_tail", {"run_dir": str(run_dir), "lines": 5, "max_bytes": 200})
    assert tail["lines"] == [f"line {i}" for i in range(995, 1000)]
    assert tail["truncated"] is True
    missing = agent("log_tail", {"run_dir": str(lab.tmp / "nothing")})
    assert missing["exists"] is False
    assert missing["lines"] == []


def test_two_racing_launches_of_one_run_start_one_server(lab) -> None:
    run_id = lab.run_id()
    state = lab.tmp / "state"
    state.mkdir()
    args = {
        "run_id": run_id,
        "argv": [sys.executable, str(FAKE_ENGINE), "--state-dir", str(state)],
        "run_dir": str(lab.tmp / "run"),
    }
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _: agent("launch", args), range(2)))
    assert all(r["ok"] for r in results), results
    assert sorted(r["already_running"] for r in results) == [False, True]
    assert results[0]["pid"] == results[1]["pid"]
    assert len(pids_with_marker(run_id)) == 2  # one supervisor, one server


def test_status_of_a_server_that_just_died_waits_for_its_supervisor_to_record_the_code(
    lab,
) -> None:
    # A busy host, made certain: the supervisor is stopped, so the SIGKILLed server stays a
    # zombie and its exit code unwritten until the supervisor runs again 0.5 s later. A status
    # read meanwhile used to answer "dead, exit code unknown", and the watch recorded the crash
    # without its code (a clean-clone run of the real-vLLM test failed on that).
    launched = lab.launch_engine()
    supervisor = launched["supervisor_pid"]
    os.kill(supervisor, signal.SIGSTOP)
    resume = threading.Timer(0.5, os.kill, (supervisor, signal.SIGCONT))
    try:
        # SIGSTOP is only queued: a supervisor not yet scheduled would, woken by the death,
        # reap the server before it stops (a clean-clone run failed so), and no zombie is left.
        wait_for(
            lambda: (stat_fields(supervisor) or ["?"])[0] == "T", what="the supervisor stopped"
        )
        os.kill(launched["pid"], signal.SIGKILL)
        wait_for(
            lambda: (stat_fields(launched["pid"]) or ["?"])[0] == "Z", what="the server a zombie"
        )
        resume.start()
        status = _status(launched)
    finally:
        resume.cancel()
        os.kill(supervisor, signal.SIGCONT)
    assert status["alive"] is False
    assert status["exit_code"] == -9


def test_status_of_a_server_whose_supervisor_is_gone_reports_no_code_it_does_not_have(
    lab,
) -> None:
    # With the supervisor killed first nobody records the server's exit: the status says
    # "unknown" (None) rather than wait for a code that will never come, or invent one.
    launched = lab.launch_engine()
    os.kill(launched["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: stat_fields(launched["supervisor_pid"]) is None, what="the supervisor gone")
    os.kill(launched["pid"], signal.SIGKILL)
    wait_for(lambda: stat_fields(launched["pid"]) is None, what="the server reaped")
    status = _status(launched)
    assert status["alive"] is False
    assert status["exit_code"] is None
