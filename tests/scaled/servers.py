"""Real redis-server and PostgreSQL processes on free loopback ports, in temporary
directories, for the scaled-mode tests. Both are started in the foreground as our own
children, so stopping them is a signal to a pid we hold."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.ports import free_port

INSTALL_HINT = ".ci/run installs the Debian packages redis-server and postgresql when missing"


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {port} within 60 s:\n{log.read_text()[-3000:]}")


def _stop(proc: subprocess.Popen[bytes], grace: float = 15) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@dataclass
class Redis:
    port: int
    process: subprocess.Popen[bytes]
    workdir: Path

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        _stop(self.process)
        shutil.rmtree(self.workdir, ignore_errors=True)


def redis_binary() -> str:
    path = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )
    if path is None:
        pytest.fail(f"redis-server is not installed: {INSTALL_HINT}", pytrace=False)
    return path


def start_redis() -> Redis:
    binary = redis_binary()
    workdir = Path(tempfile.mkdtemp(prefix="specdash-redis-"))
    port = free_port()
    log = workdir / "redis.log"
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(workdir),
            "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    _wait_for_port(port, proc, log, "redis-server")
    return Redis(port=port, process=proc, workdir=workdir)


@dataclass
class Postgres:
    port: int
    process: subprocess.Popen[bytes]
    workdir: Path
    bindir: Path
    user: str = "specdash"
    databases: list[str] = field(default_factory=list)

    def url(self, database: str = "specdash") -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        subprocess.run(
            [str(self.bindir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port),
             "-U", self.user, name],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        self.databases.append(name)
        return self.url(name)

    def stop(self) -> None:
        # SIGTERM is PostgreSQL's "smart" shutdown, which waits for clients; SIGINT is "fast".
        if self.process.poll() is None:
            self.process.send_signal(2)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)


def postgres_bindir() -> Path:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if not candidates:
        pytest.fail(f"PostgreSQL is not installed (/usr/lib/postgresql/*/bin): {INSTALL_HINT}",
                    pytrace=False)  # fmt: skip
    # The highest major version, as Debian's own wrappers would pick.
    return Path(max(candidates, key=lambda p: int(Path(p).parts[-3].split(".")[0]))).parent


def _server_user() -> dict[str, Any]:
    """Popen arguments that run initdb/postgres as `postgres` when we are root (both refuse
    root). Setting the uid in the child, not through runuser, keeps postgres our direct child."""
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        pytest.fail(f"running as root but there is no `postgres` user: {INSTALL_HINT}",
                    pytrace=False)  # fmt: skip
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def start_postgres() -> Postgres:
    bindir = postgres_bindir()
    # Not pytest's tmp_path: it is private to root, and the server runs as `postgres`.
    workdir = Path(tempfile.mkdtemp(prefix="specdash-pg-"))
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(workdir, entry.pw_uid, entry.pw_gid)
    data = workdir / "data"
    log = workdir / "postgres.log"
    as_user = _server_user()
    init = subprocess.run(
        [str(bindir / "initdb"), "-D", str(data), "-U", "specdash", "--auth=trust",
         "-E", "UTF8", "--no-sync"],
        capture_output=True, timeout=120, cwd=workdir, **as_user,
    )  # fmt: skip
    if init.returncode != 0:
        shutil.rmtree(workdir, ignore_errors=True)
        raise RuntimeError(
            f"initdb failed:\n{init.stdout.decode()[-2000:]}{init.stderr.decode()[-2000:]}"
        )
    port = free_port()
    argv = [str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(workdir),
            "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
            "-c", "full_page_writes=off", "-c", "max_connections=200"]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=workdir, **as_user)
    _wait_for_port(port, proc, log, "postgres")
    pg = Postgres(port=port, process=proc, workdir=workdir, bindir=bindir)
    deadline = time.monotonic() + 60
    while True:
        ready = subprocess.run(
            [str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
            capture_output=True, timeout=30,
        )  # fmt: skip
        if ready.returncode == 0:
            return pg
        if time.monotonic() > deadline:
            pg.stop()
            raise RuntimeError(f"postgres not ready:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)
