"""The run directory is private: another local user cannot take it over.

supervisor.py and launch.json are written into the run directory and then executed, so a
run root someone else created first (a shared /tmp), a symlink, or a directory others can
write to is refused before anything is written there.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from .helpers import agent, pids_with_marker

OTHER_UID = 65534  # nobody


def _launch(lab: Any, run_dir: str) -> dict[str, Any]:
    run_id = lab.run_id()
    result = agent(
        "launch",
        {"run_id": run_id, "argv": [sys.executable, "-c", "pass"], "run_dir": run_dir},
    )
    result["run_id"] = run_id
    return result


def _refused(lab: Any, root: Path, reason: str) -> None:
    result = _launch(lab, str(root / "run-1"))
    assert result["ok"] is False, result
    assert result["error"].startswith("unsafe run directory: "), result["error"]
    assert reason in result["error"], result["error"]
    assert pids_with_marker(result["run_id"]) == []


def test_a_run_root_is_created_private_per_user(lab: Any) -> None:
    template = str(lab.tmp / "runs-{uid}" / "run-1")
    result = _launch(lab, template)
    assert result["ok"] is True, result
    root = lab.tmp / f"runs-{os.getuid()}"
    assert result["run_dir"] == str(root / "run-1")
    for path in (root, root / "run-1"):
        assert stat.S_IMODE(path.lstat().st_mode) == 0o700
    # The readers expand the same template, so a stored template still finds the log.
    tail = agent("log_tail", {"run_dir": template})
    assert tail["path"] == str(root / "run-1" / "server.log")


def test_a_run_root_created_by_another_user_is_refused(lab: Any) -> None:
    root = lab.tmp / "runs"
    root.mkdir(mode=0o700)
    os.chown(root, OTHER_UID, OTHER_UID)
    _refused(lab, root, f"belongs to uid {OTHER_UID}, not this user")
    assert list(root.iterdir()) == []


def test_a_symlinked_run_root_is_refused_and_its_target_left_alone(lab: Any) -> None:
    target = lab.tmp / "elsewhere"
    target.mkdir(mode=0o700)
    (lab.tmp / "runs").symlink_to(target)
    _refused(lab, lab.tmp / "runs", "is a symlink")
    assert list(target.iterdir()) == []


def test_a_symlinked_run_directory_is_refused(lab: Any) -> None:
    root = lab.tmp / "runs"
    root.mkdir(mode=0o700)
    target = lab.tmp / "elsewhere"
    target.mkdir(mode=0o700)
    (root / "run-1").symlink_to(target)
    _refused(lab, root, "is a symlink")
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o1777])
def test_a_run_root_others_can_write_to_is_refused(lab: Any, mode: int) -> None:
    root = lab.tmp / "runs"
    root.mkdir()
    root.chmod(mode)
    _refused(lab, root, "writable by group or others")
    assert list(root.iterdir()) == []


def test_a_run_root_under_a_directory_others_can_swap_is_refused(lab: Any) -> None:
    shared = lab.tmp / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # writable by all and not sticky: anyone could rename "runs" away
    _refused(lab, shared / "runs", "writable by others and not sticky")
    assert list(shared.iterdir()) == []


def test_an_own_run_root_left_readable_by_others_is_tightened(lab: Any) -> None:
    root = lab.tmp / "runs"
    root.mkdir()
    root.chmod(0o755)  # what os.makedirs made of the old default's parent
    result = _launch(lab, str(root / "run-1"))
    assert result["ok"] is True, result
    assert stat.S_IMODE(root.lstat().st_mode) == 0o700


def test_the_controller_fence_uses_the_same_private_expanded_run_directory(lab: Any) -> None:
    template = str(lab.tmp / "runs-{uid}" / "run-1")
    assert agent("log_tail", {"run_dir": template, "controller": 3})["ok"] is True
    run_dir = lab.tmp / f"runs-{os.getuid()}" / "run-1"
    assert (run_dir / "controller").read_text().strip() == "3"
    assert stat.S_IMODE(run_dir.parent.lstat().st_mode) == 0o700
    assert not (lab.tmp / "runs-{uid}").exists()  # never the literal template


def test_the_controller_fence_refuses_a_symlinked_run_directory(lab: Any) -> None:
    root = lab.tmp / "runs"
    root.mkdir(mode=0o700)
    target = lab.tmp / "elsewhere"
    target.mkdir(mode=0o700)
    (root / "run-1").symlink_to(target)
    answer = agent("log_tail", {"run_dir": str(root / "run-1"), "controller": 1})
    assert answer["ok"] is False and "is a symlink" in answer["error"]
    assert list(target.iterdir()) == []
