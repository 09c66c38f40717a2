"""Worker health with two `jobworker` processes on a real PostgreSQL: the database turned
read-only for new sessions (`ALTER DATABASE ... SET default_transaction_read_only`) makes both
workers fail their passes without dying; a web process (`serve --no-worker`) then reports no
healthy worker and refuses a start; the database writable again, both recover by themselves
and a start queued afterwards is claimed and run."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.fixtures.ports import free_port
from tests.scaled.cluster import PASSWORD, ROOT, Cluster
from tests.scaled.servers import Postgres
from tests.scaled.test_fencing import instance_cleanup

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]

LEASE_S = "4"


@pytest.fixture
def cluster(tmp_path: Path, postgres_server: Postgres) -> Iterator[Cluster]:
    name = f"specdash_health_{os.getpid()}_{free_port()}"
    database_url = postgres_server.create_database(name)
    env = {
        **os.environ,
        "SPECDASH_DATABASE_URL": database_url,
        "SPECDASH_VAR_DIR": str(tmp_path),
        "SPECDASH_DATA_DIR": str(tmp_path / "data"),
        "SPECDASH_RUN_ROOT": str(tmp_path / "runs"),
        "SPECDASH_DEMO_PASSWORD": PASSWORD,
        "SPECDASH_JOB_LEASE_S": LEASE_S,
        "SPECDASH_JOB_HEARTBEAT_S": "1",
        "SPECDASH_JOB_RETRY_MAX_S": "1",
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
        board.stop()
        _read_only(database_url, False)
        instance_cleanup(database_url)


def _read_only(url: str, on: bool) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        # This session itself may have started read-only: make it writable first.
        conn.execute("SET default_transaction_read_only = off")
        name = conn.execute("SELECT current_database()").fetchone()
        assert name is not None
        value = "on" if on else "off"
        conn.execute(f'ALTER DATABASE "{name[0]}" SET default_transaction_read_only = {value}')


def _until(check: Callable[[], Any], timeout: float, what: str, cluster: Cluster) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}\n{cluster.logs()}"
        time.sleep(0.3)
    return value


def test_two_workers_survive_a_read_only_postgres_and_the_web_refuses_new_work_meanwhile(
    cluster: Cluster,
) -> None:
    url = cluster.env["SPECDASH_DATABASE_URL"]
    port = free_port()
    cluster.start_web("web", port)
    workers = [cluster.start_worker(name) for name in ("worker-a", "worker-b")]
    token = cluster.manage("specdash", "token", "--user", "operator", "--name", "t").strip()
    api = httpx.Client(
        base_url=f"http://127.0.0.1:{port}/api/v1",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    host = api.get("/hosts").json()["items"][0]["id"]
    sim_port = free_port()
    argv = [sys.executable, "-m", "benchlib.simulator", "--host", "127.0.0.1", "--port",
            str(sim_port), "--profile", "fast"]  # fmt: skip
    created = api.post("/profiles", json={
        "name": "health check", "engine": "simulator", "host_id": host, "launch_argv": argv,
        "workdir": str(ROOT), "port": sim_port, "gpu_ids": [], "readiness_timeout_s": 60,
        "served_model_name": "specdash-sim", "stop_grace_s": 2,
    })  # fmt: skip
    assert created.status_code == 201, created.text
    profile = created.json()["id"]

    def health() -> dict[str, Any]:
        return dict(api.get("/health").json())

    up = _until(lambda: (h := health())["ok"] and len(h["workers"]) == 2 and h, 30, "two workers",
                cluster)  # fmt: skip
    assert {w["worker_id"] for w in up["workers"]} == {"worker-a", "worker-b"}

    _read_only(url, True)
    down = _until(lambda: not (h := health())["ok"] and h, 30, "the health down", cluster)
    refused = api.post(f"/profiles/{profile}/start")
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "worker_unavailable"
    for worker in workers:
        assert worker.process.poll() is None, worker.tail()
        log = worker.log.read_text()
        assert "its loop failed" in log and "read-only transaction" in log, worker.tail()

    _read_only(url, False)
    _until(lambda: (h := health())["ok"] and len(h["workers"]) == 2 and all(
        w["healthy"] for w in h["workers"]) and h, 30, "both workers healthy again", cluster)  # fmt: skip
    _until(lambda: all("recovered after" in w.log.read_text() for w in workers), 10,
           "both recoveries logged", cluster)  # fmt: skip
    started = api.post(f"/profiles/{profile}/start")
    assert started.status_code == 202, started.text
    instance = started.json()["instance"]["id"]
    ready = _until(
        lambda: (i := api.get(f"/instances/{instance}").json())["state"] not in (
            "starting", "loading") and i, 90, "the server started", cluster,
    )  # fmt: skip
    assert ready["state"] == "ready", ready
    assert api.post(f"/instances/{instance}/stop").status_code == 202
    final = _until(
        lambda: (i := api.get(f"/instances/{instance}").json())["state"] not in (
            "ready", "stopping") and i, 90, "the server stopped", cluster,
    )  # fmt: skip
    assert final["state"] == "stopped", final
    assert "No job worker has reported" in down["message"] or "unhealthy" in down["message"]
