"""Fencing on real PostgreSQL with two job-worker processes: the worker that drives a
server.run is stopped (SIGSTOP) for longer than its lease, the other reaps and adopts the
server, and when the first wakes (SIGCONT) it stops driving at once. Checked from the
agent's side (the run directory's controller log): one controller at a time throughout, the
stale one never heard from again; and the final states are true."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.fixtures.ports import free_port
from tests.scaled.cluster import PASSWORD, Cluster
from tests.scaled.servers import Postgres

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]

LEASE_S = 6.0
HEARTBEAT_S = 1.0
STOPPED_S = 14.0  # the worker's stall: more than twice its lease

START = """
import json
from hosts.models import ServerProfile
from hosts.services import instance_start
p = ServerProfile.objects.get(name="Simulated SGLang baseline")
p.pk = None
p.name = "fenced baseline"
p.port = {port}
p.launch_argv = ["{port}" if a == "30001" else a for a in p.launch_argv]
p.save()
print(json.dumps({{"id": instance_start(profile=p).pk}}))
"""
STOP = """
from hosts.models import ServerInstance
from hosts.services import instance_stop
instance_stop(instance=ServerInstance.objects.get(pk={id}))
"""


@pytest.fixture
def cluster(tmp_path: Path, postgres_server: Postgres) -> Iterator[Cluster]:
    database_url = postgres_server.create_database(f"specdash_fence_{os.getpid()}_{free_port()}")
    env = {
        **os.environ,
        "SPECDASH_DATABASE_URL": database_url,
        "SPECDASH_VAR_DIR": str(tmp_path),
        "SPECDASH_DATA_DIR": str(tmp_path / "data"),
        "SPECDASH_RUN_ROOT": str(tmp_path / "runs"),
        "SPECDASH_DEMO_PASSWORD": PASSWORD,
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    env.pop("SPECDASH_REDIS_URL", None)
    board = Cluster(env=env, var=tmp_path)
    board.manage("migrate", "--no-input", "-v", "0")
    board.manage("seed_demo")
    try:
        yield board
    finally:
        for proc in board.procs:  # never leave a stopped worker behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
        board.stop()
        instance_cleanup(database_url)


def instance_cleanup(url: str) -> None:
    """A simulator the test left running (a failure midway) is killed by its recorded pid."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT pid FROM hosts_serverinstance WHERE pid IS NOT NULL AND state <> 'stopped'"
        ).fetchall()
    for (pid,) in rows:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _row(url: str, sql: str, *args: Any) -> tuple[Any, ...] | None:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql, args).fetchone()
    return tuple(row) if row is not None else None


def _rows(url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return [tuple(r) for r in conn.execute(sql, args).fetchall()]


def _until(check: Callable[[], Any], deadline_s: float, what: str, cluster: Cluster) -> Any:
    deadline = time.monotonic() + deadline_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {deadline_s:.0f} s: {what}\n{cluster.logs()}")
        time.sleep(0.2)


def _controller_log(run_dir: str) -> list[dict[str, Any]]:
    path = Path(run_dir) / "controllers.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_stalled_worker_past_its_lease_stops_driving_its_server_once_woken_and_never_overwrites_the_truth(
    cluster: Cluster,
) -> None:
    db = cluster.env["SPECDASH_DATABASE_URL"]
    flags = ("--lease-seconds", f"{LEASE_S:g}", "--heartbeat-interval", f"{HEARTBEAT_S:g}",
             "--poll-interval", "0.2")  # fmt: skip
    worker_a = cluster.start_worker("worker-a", *flags)
    out = cluster.manage("shell", "-c", START.format(port=free_port()))
    instance_id = json.loads(out.strip().splitlines()[-1])["id"]

    def instance() -> tuple[Any, ...]:
        row = _row(db, "SELECT state, run_dir FROM hosts_serverinstance WHERE id = %s", instance_id)
        assert row is not None
        return row

    _until(lambda: instance()[0] == "ready", 90, "the server ready", cluster)
    run_dir = instance()[1]
    first = _row(
        db,
        "SELECT id, worker_id, state FROM hosts_job WHERE kind = 'server.run' ORDER BY id LIMIT 1",
    )
    assert first is not None and first[1:] == ("worker-a", "running"), first
    first_id = first[0]
    # Worker A drives it: its job's calls reach the agent, fenced with its job id.
    _until(
        lambda: any(e["controller"] == first_id for e in _controller_log(run_dir)),
        30,
        "worker A's calls in the controller log",
        cluster,
    )
    worker_b = cluster.start_worker("worker-b", *flags)
    # Worker B is up and polling before A stalls (its start is not what is measured); a fixed
    # pause was not always long enough for Django to start on a loaded machine.
    _until(lambda: "job worker worker-b started" in worker_b.log.read_text(), 60,
           "worker B started", cluster)  # fmt: skip

    os.kill(worker_a.pid, signal.SIGSTOP)
    stopped_at = time.time()
    # Worker B reaps A's job and its interrupt hook queues the adoption, which B runs.
    adopter = _until(
        lambda: _row(
            db,
            "SELECT id FROM hosts_job WHERE kind = 'server.run' AND id > %s "
            "AND worker_id = 'worker-b' AND state = 'running'",
            first_id,
        ),
        45,
        "an adopting server.run on worker B",
        cluster,
    )[0]
    reaped = _row(db, "SELECT state, error FROM hosts_job WHERE id = %s", first_id)
    assert reaped == ("interrupted", "worker worker-a stopped renewing its lease")
    _until(
        lambda: sum(e["controller"] == adopter for e in _controller_log(run_dir)) >= 3,
        30,
        "the adopter driving the server",
        cluster,
    )
    time.sleep(max(0.0, STOPPED_S - (time.time() - stopped_at)))

    woke_at = time.time()
    os.kill(worker_a.pid, signal.SIGCONT)
    # The woken worker finds its lease past expiry and drops the job without a call.
    _until(
        # Either way it notices (its lease renewal matching no row, or its own lease deadline
        # passed first), it says the job is no longer run by it.
        lambda: f"job {first_id} is no longer run by worker worker-a" in worker_a.log.read_text(),
        30,
        "worker A noticing it lost the job",
        cluster,
    )
    # A few of the adopter's watch cycles after the wake-up: time for a stale driver to show.
    seen = len(_controller_log(run_dir))
    _until(lambda: len(_controller_log(run_dir)) >= seen + 4, 30, "more adopter calls", cluster)

    log = _controller_log(run_dir)
    # Not one call from the woken worker, accepted or refused.
    stale = [e for e in log if e["controller"] == first_id and e["t"] >= woke_at]
    assert stale == [], f"the woken worker still reached the agent: {stale}"
    # At most the one call that was already in flight when the worker was stopped.
    in_flight = [e for e in log if e["controller"] == first_id and e["t"] >= stopped_at]
    assert len(in_flight) <= 1, in_flight
    assert all(e["accepted"] for e in log), [e for e in log if not e["accepted"]]
    controllers = [e["controller"] for e in log]
    # One controller at a time: A's calls, then only the adopter's; never A's again.
    assert controllers == sorted(controllers), controllers
    assert set(controllers) == {first_id, adopter}
    switch = controllers.index(adopter)
    assert log[switch]["t"] > stopped_at + LEASE_S * 0.5
    assert any(e["t"] > woke_at for e in log[switch:])

    # The stop goes to the one driver there is; the states stay true.
    cluster.manage("shell", "-c", STOP.format(id=instance_id))
    _until(lambda: instance()[0] == "stopped", 90, "the instance stopped", cluster)
    jobs = _rows(
        db,
        "SELECT id, worker_id, state, error FROM hosts_job WHERE kind = 'server.run' ORDER BY id",
    )
    assert jobs[0] == (
        first_id,
        "worker-a",
        "interrupted",
        "worker worker-a stopped renewing its lease",
    )
    _until(
        lambda: _row(db, "SELECT state FROM hosts_job WHERE id = %s", adopter) == ("succeeded",),
        30,
        "the adopter finished",
        cluster,
    )
    assert [j[0] for j in jobs] == [first_id, adopter], jobs
    # Both workers are still alive: a lost job is dropped, not a crash of the worker.
    assert worker_a.process.poll() is None and worker_b.process.poll() is None
    assert "matched no row" in worker_a.log.read_text() or "expired before" in (
        worker_a.log.read_text()
    )
