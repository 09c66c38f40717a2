"""scripts/system-deps.sh: the one script `make test` and `.ci/run` install system packages with."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "system-deps.sh"


def run_as_nobody(path_dir: Path) -> subprocess.CompletedProcess[str]:
    """The script as an unprivileged user whose PATH holds nothing but `id`: no sudo, no chromium."""
    (path_dir / "id").symlink_to(shutil.which("id") or "/usr/bin/id")
    path_dir.chmod(0o755)
    return subprocess.run(
        [
            shutil.which("runuser") or "/usr/sbin/runuser",
            "-u",
            "nobody",
            "--",
            "/bin/bash",
            str(SCRIPT),
        ],
        env={"PATH": str(path_dir)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the script as another user")
def test_without_root_or_sudo_it_stops_at_once_with_the_command_to_run(tmp_path):
    tmp_path.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    result = run_as_nobody(bin_dir)
    assert result.returncode == 1
    assert "not installed: chromium" in result.stderr
    assert "sudo apt-get install -y --no-install-recommends chromium" in result.stderr
    assert "redis-server" in result.stderr and "cmake" in result.stderr


def test_with_everything_installed_it_does_nothing():
    # This machine ran it already (make test calls it first), so nothing is missing now.
    result = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
