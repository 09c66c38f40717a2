"""The account `make test` gives of itself: skips fail unless expected, every pytest stage leaves
its counts and durations, and the watchdog stops a hung stage before CI's limit with the test it
was running named (scripts/test.sh, scripts/stage_report.py, tests/fixtures/stagereport.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_pytest(
    cwd: Path, *args: str, report: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("SPECDASH_TEST_REPORT", None)
    if report is not None:
        env["SPECDASH_TEST_REPORT"] = str(report)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.fixtures.stagereport",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(cwd),
            *args,
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        # A hang guard, not a figure: a starved machine takes most of a minute to start two
        # xdist workers (each imports Django and the suite); kept under the test's own 120 s.
        timeout=110,
        check=False,
    )


def write(path: Path, source: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))


def test_an_unexpected_skip_fails_the_run_and_is_named(tmp_path):
    write(
        tmp_path / "test_some.py",
        """
        import pytest

        def test_runs():
            assert True

        @pytest.mark.skipif(True, reason="not here")
        def test_quietly_skipped():
            assert False
        """,
    )
    result = run_pytest(tmp_path, "test_some.py")
    assert result.returncode == 1, result.stdout
    assert "unexpected skips" in result.stdout
    assert "test_some.py::test_quietly_skipped: not here" in result.stdout
    assert "1 passed, 1 skipped" in result.stdout


def test_a_skip_inside_the_test_and_an_xfail_count_as_skips_too(tmp_path):
    write(
        tmp_path / "test_some.py",
        """
        import pytest

        def test_gives_up():
            pytest.skip("no tool")

        @pytest.mark.xfail(reason="known")
        def test_known_bad():
            assert False
        """,
    )
    result = run_pytest(tmp_path, "test_some.py")
    assert result.returncode == 1, result.stdout
    assert "test_some.py::test_gives_up: no tool" in result.stdout
    assert "test_some.py::test_known_bad: xfail known" in result.stdout


def test_an_expected_skip_passes_and_says_where_it_is_expected(tmp_path):
    # The same node id as the allowlisted test: the allowlist is keyed by it.
    write(
        tmp_path / "tests/hosts/transports/test_local.py",
        """
        import pytest

        @pytest.mark.skipif(True, reason="unshare refused")
        def test_pct_stand_in_can_run_the_command_in_its_own_pid_namespace():
            assert False
        """,
    )
    result = run_pytest(tmp_path, "tests/hosts/transports/test_local.py")
    assert result.returncode == 0, result.stdout
    assert "expected skip: tests/hosts/transports/test_local.py::" in result.stdout
    assert "unprivileged containers" in result.stdout


def test_the_report_counts_passes_failures_skips_and_deselected_tests(tmp_path):
    write(
        tmp_path / "test_some.py",
        """
        import pytest

        def test_one():
            pass

        def test_two():
            assert 1 == 2

        @pytest.mark.skip(reason="off")
        def test_three():
            pass

        def test_left_out():
            pass
        """,
    )
    report = tmp_path / "stage.jsonl"
    result = run_pytest(tmp_path, "test_some.py", "-k", "not left_out", report=report)
    assert result.returncode == 1
    records = [json.loads(line) for line in report.read_text().splitlines()]
    summary = records[-1]
    assert summary["event"] == "summary"
    assert summary["counts"] == {"passed": 1, "failed": 1, "skipped": 1, "deselected": 1}
    assert summary["unexpected_skips"] == ["test_some.py::test_three"]
    starts = [r["nodeid"] for r in records if r["event"] == "start"]
    assert starts == [
        "test_some.py::test_one",
        "test_some.py::test_two",
        "test_some.py::test_three",
    ]


def test_the_watchdog_stops_a_hung_stage_and_prints_the_table_with_the_running_test(tmp_path):
    write(
        tmp_path / "tests_hang/test_hang.py",
        """
        import time

        def test_quick():
            pass

        def test_hangs():
            time.sleep(600)
        """,
    )
    # A make that runs every stage but pytest at once, and pytest on the hanging file.
    fake_make = tmp_path / "make"
    fake_make.write_text(
        "#!/bin/sh\n"
        f'[ "$2" = pytest ] || exit 0\n'
        f"cd {tmp_path} && PYTHONPATH={ROOT} exec {sys.executable} -m pytest -q "
        "-p tests.fixtures.stagereport -p no:cacheprovider --rootdir . tests_hang\n"
    )
    fake_make.chmod(0o755)
    reports = tmp_path / "reports"
    budget = 20
    env = dict(
        os.environ,
        MAKE=str(fake_make),
        SPECDASH_TEST_BUDGET_S=str(budget),
        SPECDASH_TEST_REPORTS=str(reports),
    )
    env.pop("SPECDASH_TEST_REPORT", None)
    result = subprocess.run(
        ["bash", str(ROOT / "scripts/test.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=budget + 60,
        check=False,
    )
    assert result.returncode == 124, result.stdout + result.stderr
    assert (
        f"passed its budget of {budget} s" in result.stderr and "in stage pytest" in result.stderr
    )
    table = result.stdout[result.stdout.index("stage table") :]
    rows = [line.split() for line in table.splitlines()[2:]]
    stage_rows = [row for row in rows if len(row) > 1 and re.fullmatch(r"\d+\.\d", row[1])]
    stages = [row[0] for row in stage_rows]
    # Every stage before pytest ran; nothing after it did.
    assert stages == ["system-deps", "venv", "lint", "typecheck", "engines", "pytest"]
    pytest_row = stage_rows[-1]
    # seconds, passed, failed, error, skipped, deselected, status: one test passed before the hang
    assert pytest_row[2:] == ["1", "0", "0", "0", "0", "STOPPED"]
    assert "pytest was stopped in tests_hang/test_hang.py::test_hangs, running for" in table
    assert "tests_hang/test_hang.py::test_quick" in table  # among the slowest


def test_under_xdist_the_controller_alone_writes_every_count_once(tmp_path):
    # `make pytest` runs on pytest-xdist workers: each worker collects and deselects the whole
    # suite and reports its tests to the controller, which writes the one record.
    write(
        tmp_path / "test_first.py",
        """
        import pytest

        def test_one():
            pass

        def test_left_out():
            pass

        @pytest.mark.skip(reason="off")
        def test_skipped():
            pass
        """,
    )
    write(
        tmp_path / "test_second.py",
        """
        def test_two():
            assert 1 == 2

        def test_three():
            pass
        """,
    )
    report = tmp_path / "stage.jsonl"
    result = run_pytest(
        tmp_path, "-n", "2", "--dist", "loadfile", "-k", "not left_out", ".", report=report
    )
    assert result.returncode == 1, result.stdout
    records = [json.loads(line) for line in report.read_text().splitlines()]
    assert [r["event"] for r in records].count("session") == 1
    summary = records[-1]
    assert summary["event"] == "summary"
    assert summary["counts"] == {"passed": 2, "failed": 1, "skipped": 1, "deselected": 1}
    assert summary["unexpected_skips"] == ["test_first.py::test_skipped"]
    starts = sorted(r["nodeid"] for r in records if r["event"] == "start")
    assert starts == [
        "test_first.py::test_one",
        "test_first.py::test_skipped",
        "test_second.py::test_three",
        "test_second.py::test_two",
    ]


def test_a_stopped_stage_names_every_test_still_running(tmp_path):
    # Two workers, two tests in flight when the watchdog stops the stage: both are named.
    reports = tmp_path / "reports"
    reports.mkdir()
    records = [
        {"event": "start", "nodeid": "test_a.py::test_done", "t": 100.0},
        {"event": "start", "nodeid": "test_a.py::test_hangs", "t": 101.0},
        {"event": "result", "nodeid": "test_a.py::test_done", "when": "call",
         "outcome": "passed", "duration": 1.0},
        {"event": "result", "nodeid": "test_a.py::test_done", "when": "teardown",
         "outcome": "ok", "duration": 0.0},
        {"event": "start", "nodeid": "test_b.py::test_hangs_too", "t": 102.0},
    ]  # fmt: skip
    (reports / "pytest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    timings = reports / "stages.tsv"
    timings.write_text("pytest\t600.0\tSTOPPED\n")
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts/stage_report.py"), str(reports), str(timings)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    stopped = [line for line in result.stdout.splitlines() if "was stopped in" in line]
    assert [line.split(" was stopped in ")[1].split(",")[0] for line in stopped] == [
        "test_a.py::test_hangs",
        "test_b.py::test_hangs_too",
    ]
