"""Start-up checks: `serve`, `jobworker` and `startcheck` (the first step of `make run`) refuse
to start on a var dir or a database that does not take writes, saying which and why, instead
of a dashboard that answers 500 on every login."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from tests.fixtures.ports import free_port

ROOT = Path(settings.BASE_DIR)


def _env(var: Path) -> dict[str, str]:
    env = {**os.environ, "SPECDASH_VAR_DIR": str(var), "SPECDASH_RUN_ROOT": str(var / "runs"),
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def _manage(var: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=_env(var), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """``path`` (a folder or a file) read-only for this process too: a read-only bind mount as
    root (whom permission bits do not stop), the permission bits otherwise."""
    if os.geteuid() == 0:
        subprocess.run(["mount", "--bind", str(path), str(path)], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,bind,ro", str(path)], check=True)
            yield
        finally:
            subprocess.run(["umount", str(path)], check=True)
    else:
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)


def test_a_read_only_var_dir_is_named_by_every_start_command(tmp_path: Path) -> None:
    var = tmp_path / "var"
    var.mkdir()
    assert _manage(var, "migrate", "--no-input", "-v", "0").returncode == 0
    with read_only(var):
        for args in (
            ("serve", "--port", str(free_port())),
            ("jobworker",),
            ("startcheck",),
            ("startcheck", "--dirs-only"),
        ):
            done = _manage(var, *args)
            assert done.returncode != 0, (args, done.stdout, done.stderr)
            assert "specdash is at" not in done.stdout
            assert "specdash cannot start" in done.stderr, (args, done.stderr)
            assert f"cannot write to the var dir (SPECDASH_VAR_DIR) {var}" in done.stderr
            assert "Traceback" not in done.stderr, done.stderr
    assert _manage(var, "startcheck").returncode == 0


def test_a_database_that_refuses_writes_is_named_before_anything_listens(tmp_path: Path) -> None:
    var = tmp_path / "var"
    var.mkdir()
    assert _manage(var, "migrate", "--no-input", "-v", "0").returncode == 0
    database = var / "specdash.sqlite3"
    with read_only(database):
        for args in (("serve", "--port", str(free_port())), ("jobworker",), ("startcheck",)):
            done = _manage(var, *args)
            assert done.returncode != 0, (args, done.stdout, done.stderr)
            assert f"cannot write to the database {database}" in done.stderr, done.stderr
            assert "readonly database" in done.stderr, done.stderr
            assert "var dir" not in done.stderr  # the folders themselves are fine
        assert _manage(var, "startcheck", "--dirs-only").returncode == 0


def test_a_database_without_its_tables_says_to_migrate(tmp_path: Path) -> None:
    done = _manage(tmp_path / "var", "startcheck")
    assert done.returncode != 0
    assert (
        "cannot write to the database" in done.stderr and "run `manage.py migrate`" in done.stderr
    )
