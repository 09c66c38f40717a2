"""The agent's own fence: one controller (job) at a time per run directory; a call from a
controller lower than the highest seen (a job that was taken over) is refused and does
nothing, and every check is logged where the run lives."""

from __future__ import annotations

import json
from pathlib import Path

from .helpers import agent


def _log(run_dir: Path) -> list[dict[str, object]]:
    lines = (run_dir / "controllers.log").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_a_lower_controller_is_refused_after_a_higher_one_and_each_call_is_logged(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    args = {"run_dir": str(run_dir), "lines": 5}
    assert agent("log_tail", {**args, "controller": 7})["ok"] is True
    assert agent("log_tail", {**args, "controller": 9})["ok"] is True
    refused = agent("log_tail", {**args, "controller": 7})
    assert refused["ok"] is False and refused["superseded"] is True
    assert "job 9 now controls this run, not 7" in refused["error"]
    assert "path" not in refused  # the command itself never ran
    assert agent("log_tail", {**args, "controller": 9})["ok"] is True
    assert [(e["controller"], e["command"], e["accepted"]) for e in _log(run_dir)] == [
        (7, "log_tail", True),
        (9, "log_tail", True),
        (7, "log_tail", False),
        (9, "log_tail", True),
    ]
    assert (run_dir / "controller").read_text().strip() == "9"


def test_the_fence_writes_into_no_run_directory_others_can_write_to(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o700)
    shared.chmod(0o777)  # writable by anyone: another user could plant a log or a lock
    answer = agent("log_tail", {"run_dir": str(shared), "controller": 3})
    assert answer["ok"] is False and "unsafe run directory" in answer["error"]
    assert list(shared.iterdir()) == []


def test_calls_without_a_controller_are_not_fenced(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "controller").write_text("9\n")
    assert agent("log_tail", {"run_dir": str(run_dir)})["ok"] is True
    assert not (run_dir / "controllers.log").exists()


def test_a_relative_run_dir_with_a_controller_is_refused(tmp_path: Path) -> None:
    answer = agent("log_tail", {"run_dir": "relative/run", "controller": 1})
    assert answer["ok"] is False and "absolute" in answer["error"]
