"""Start-up checks of ``serve``, ``jobworker`` and ``startcheck`` (``make run``): the var dir,
the data dir and the database must take writes. Without them the dashboard would start and
answer 500 on every login, and its worker would fail at its first write; said here instead,
one line per problem, before anything listens."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

from django.conf import settings
from django.db import DatabaseError, connection

from core.jobs.health import worker_beat, worker_gone
from core.jobs.worker import Worker

# Written and flushed to disk, not just created: a full disk still creates an empty file.
_PROBE_BYTES = 4096


def _dir_problem(what: str, path: Path) -> str | None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".specdash-write-check-") as probe:
            probe.write(b"\0" * _PROBE_BYTES)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        return f"cannot write to {what} {path}: {exc.strerror or exc}"
    return None


def directory_problems() -> list[str]:
    """What keeps the var dir, the data dir or an SQLite database's folder from taking writes."""
    dirs = {
        "the var dir (SPECDASH_VAR_DIR)": Path(settings.VAR_DIR),
        "the data dir (SPECDASH_DATA_DIR)": Path(settings.SPECDASH_DATA_DIR),
    }
    db = settings.DATABASES["default"]
    if db["ENGINE"] == "django.db.backends.sqlite3":
        # SQLite writes its -wal and -shm files beside the database.
        dirs["the database's folder"] = Path(db["NAME"]).parent
    problems = []
    for what, path in dirs.items():
        problem = _dir_problem(what, path)
        if problem is not None:
            problems.append(problem)
    return problems


def database_problem(*, worker: Worker | None = None) -> str | None:
    """A committed write to the database, or what refused it. With ``worker`` the write is
    that worker's first beat (so it counts as alive from the first request on); without, a
    row written and deleted again."""
    where = connection.settings_dict.get("NAME") or connection.vendor
    try:
        if worker is not None:
            worker.record_beat()
        else:
            check_id = f"start-up check {socket.gethostname()}:{os.getpid()}"
            worker_beat(worker_id=check_id)
            worker_gone(worker_id=check_id)
    except DatabaseError as exc:
        hint = ""
        if "no such table" in str(exc) or "does not exist" in str(exc):
            hint = " (run `manage.py migrate`)"
        return f"cannot write to the database {where}: {exc}{hint}"
    finally:
        connection.close()
    return None


def startup_problems(*, database: bool = True, worker: Worker | None = None) -> list[str]:
    problems = directory_problems()
    if database:
        problem = database_problem(worker=worker)
        if problem is not None:
            problems.append(problem)
    return problems


def startup_message(problems: list[str]) -> str:
    lines = "\n".join(f"  - {p}" for p in problems)
    return (
        f"specdash cannot start:\n{lines}\n"
        "Make these writable (and the disk not full), then start again (docs/operations.md, "
        '"Job worker health").'
    )
