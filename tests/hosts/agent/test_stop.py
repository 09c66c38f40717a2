from __future__ import annotations

import os
import signal
from typing import Any

from tests.fixtures.procs import alive

from .helpers import agent, comm, pids_with_marker, ppid_of, start_time, stat_fields, wait_for


def _identity(launched: dict[str, Any]) -> dict[str, Any]:
    return {k: launched[k] for k in ("run_id", "pid", "pgid", "sid", "start_time", "run_dir")}


def _stop(launched: dict[str, Any], **extra: object) -> dict[str, Any]:
    result = agent(
        "stop", {**_identity(launched), "grace_seconds": 10, "kill_wait_seconds": 10, **extra}
    )
    assert result["ok"] is True, result
    return result


def _pids(infos: dict[str, Any]) -> dict[str, int]:
    return {name: info["pid"] for name, info in infos.items()}


def test_members_are_found_by_group_session_and_marker(lab) -> None:
    launched = lab.launch_engine("--workers", "2", "--escape", "--zombie")
    infos = lab.wait_engine(launched, workers=2, escaped=True)
    pids = _pids(infos)
    members = agent("members", _identity(launched))
    by_pid = {m["pid"]: m for m in members["members"]}
    assert by_pid[launched["pid"]]["role"] == "server"
    assert by_pid[launched["supervisor_pid"]]["role"] == "supervisor"
    assert by_pid[launched["supervisor_pid"]]["comm"] == "specdash-sup"
    assert set(by_pid[pids["worker-1"]]["found_by"]) == {"pgid", "sid", "marker"}
    assert by_pid[pids["worker-1"]]["comm"].startswith("fake::worker")
    assert by_pid[pids["escaped"]]["found_by"] == ["marker"]
    assert os.getpid() not in by_pid
    zombie = infos["parent"]["zombie"]
    wait_for(lambda: (stat_fields(zombie) or ["?"])[0] == "Z", what="zombie")
    members = agent("members", _identity(launched))
    by_pid = {m["pid"]: m for m in members["members"]}
    assert by_pid[zombie]["state"] == "Z"
    assert set(by_pid[zombie]["found_by"]) == {"pgid", "sid"}  # a zombie has no environ left
    verify = agent("verify", _identity(launched))
    assert str(zombie) not in " ".join(verify["reasons"])


def test_zombies_are_reported_not_counted_as_survivors(lab) -> None:
    launched = lab.launch_engine("--zombie", "--workers", "1")
    infos = lab.wait_engine(launched, workers=1)
    assert infos["parent"]["zombie"]
    result = _stop(launched)
    assert result["clean"] is True
    assert result["survivors"] == []


def test_sigkilled_parent_leaves_renamed_orphans_that_stop_still_kills(lab) -> None:
    # Lifecycle case 4: SGLang's own cleanup never runs when its parent is SIGKILLed.
    launched = lab.launch_engine("--workers", "3")
    pids = _pids(lab.wait_engine(launched, workers=3))
    workers = [pids[f"worker-{i}"] for i in range(3)]
    os.kill(launched["pid"], signal.SIGKILL)
    wait_for(lambda: not alive(launched["pid"]), what="parent gone")
    supervisor = launched["supervisor_pid"]
    # Re-parented: to the supervisor, a child subreaper, rather than to init.
    wait_for(lambda: all(ppid_of(pid) == supervisor for pid in workers), what="re-parenting")
    for pid in workers:
        assert alive(pid)
        assert comm(pid).startswith("fake::worker")
        assert "python" not in comm(pid)
    found = agent("members", {"run_id": launched["run_id"]})  # the marker alone
    assert set(workers) <= {m["pid"] for m in found["members"]}

    result = _stop(launched)
    assert result["clean"] is True
    assert set(workers) <= set(result["terminated"])
    assert result["survivors"] == []
    assert not any(alive(pid) for pid in workers)
    assert result["exit_code"] == -9
    assert pids_with_marker(launched["run_id"]) == []


def test_workers_ignoring_sigterm_are_killed_after_the_grace_period(lab) -> None:
    # Lifecycle case 5.
    launched = lab.launch_engine("--workers", "2", "--workers-ignore-term")
    pids = _pids(lab.wait_engine(launched, workers=2))
    workers = [pids["worker-0"], pids["worker-1"]]
    result = _stop(launched, grace_seconds=1.5)
    assert sorted(result["killed"]) == sorted(workers)
    assert launched["pid"] in result["terminated"]
    assert result["survivors"] == []
    assert result["duration"] >= 1.5
    assert not any(alive(pid) for pid in workers)


def test_server_ignoring_sigterm_is_killed_and_the_supervisor_records_it(lab) -> None:
    launched = lab.launch_engine("--parent-ignore-term")
    lab.wait_engine(launched, workers=0)
    result = _stop(launched, grace_seconds=1)
    assert result["killed"] == [launched["pid"]]
    assert launched["supervisor_pid"] not in result["killed"]
    assert result["exit_code"] == -9
    assert result["clean"] is True


def test_worker_that_left_the_group_and_session_is_still_found_and_killed(lab) -> None:
    # Lifecycle case 6: double fork + setsid takes it out of pgid and sid.
    launched = lab.launch_engine("--workers", "2", "--escape", "--workers-ignore-term")
    infos = lab.wait_engine(launched, workers=2, escaped=True)
    escaped = infos["escaped"]
    assert escaped["sid"] != launched["sid"]
    assert escaped["pgid"] != launched["pgid"]
    result = _stop(launched, grace_seconds=1)
    assert escaped["pid"] in result["killed"]
    assert result["survivors"] == []
    assert not alive(escaped["pid"])


def test_stop_leaves_unrelated_python_processes_running(lab) -> None:
    # Lifecycle case 7: same user, same interpreter, even a marker that only shares a prefix.
    launched = lab.launch_engine("--workers", "2", "--workers-ignore-term")
    lab.wait_engine(launched, workers=2)
    plain, _ = lab.helper("sleep")
    lookalike, _ = lab.helper(
        "sleep", env={**os.environ, "SPECDASH_RUN_ID": launched["run_id"] + "-other"}
    )
    result = _stop(launched, grace_seconds=1)
    assert result["clean"] is True
    signalled = set(result["terminated"]) | set(result["killed"])
    assert plain not in signalled
    assert lookalike not in signalled
    assert alive(plain)
    assert alive(lookalike)


def test_recycled_ids_are_not_members_without_the_marker(lab) -> None:
    # The pid/pgid/sid recorded for a server now belong to a process that started earlier.
    innocent, _ = lab.helper("sleep")  # its own session: pid == pgid == sid
    recorded = {
        "run_id": lab.run_id(),
        "pid": innocent,
        "pgid": innocent,
        "sid": innocent,
        "start_time": start_time(innocent) + 100,
    }
    members = agent("members", recorded)
    assert members["members"] == []
    assert any("started before the server" in n for n in members["notes"])
    result = agent("stop", {**recorded, "grace_seconds": 0.5, "kill_wait_seconds": 0.5})
    assert result["terminated"] == result["killed"] == []
    assert alive(innocent)


def test_stop_of_a_run_that_is_gone_is_a_clean_no_op(lab) -> None:
    result = agent("stop", {"run_id": lab.run_id(), "grace_seconds": 1})
    assert result["ok"] is True
    assert result["clean"] is True
    assert result["terminated"] == result["killed"] == result["survivors"] == []


def test_kill_pids_checks_the_start_time_of_each_pid(lab) -> None:
    pid, _ = lab.helper("sleep")
    wrong = agent("kill_pids", {"pids": [{"pid": pid, "start_time": start_time(pid) + 1}]})
    assert wrong["signalled"] == []
    assert wrong["skipped"] == [{"pid": pid, "reason": "start_time changed (pid reused)"}]
    assert alive(pid)
    protected = agent("kill_pids", {"pids": [{"pid": 1, "start_time": start_time(1)}]})
    assert protected["signalled"] == []
    right = agent(
        "kill_pids",
        {
            "pids": [{"pid": pid, "start_time": start_time(pid)}],
            "signal": "TERM",
            "wait_seconds": 10,
        },
    )
    assert right["signalled"] == [pid]
    assert right["signal"] == signal.SIGTERM
    wait_for(lambda: not alive(pid), what="killed pid gone")


def test_ids_recorded_before_a_reboot_are_ignored(lab) -> None:
    innocent, _ = lab.helper("sleep")
    recorded = {
        "run_id": lab.run_id(),
        "pid": innocent,
        "pgid": innocent,
        "sid": innocent,
        "start_time": start_time(innocent),  # even a perfect match
        "boot_id": "00000000-0000-0000-0000-000000000000",
    }
    assert agent("members", recorded)["members"] == []
    assert agent("status", recorded)["alive"] is False
    agent("stop", {**recorded, "grace_seconds": 0.5, "kill_wait_seconds": 0.5})
    assert alive(innocent)
