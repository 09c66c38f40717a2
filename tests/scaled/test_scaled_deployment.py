"""The scaled layout end to end: real PostgreSQL and Redis, two Daphne web processes, two job
workers. A sweep launched through web 1 runs on exactly one worker, is watched live through
web 2, and killing its worker leaves it interrupted with the finished levels intact."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.benchmarks.conftest import Simulator, start_simulator
from tests.fixtures.ports import free_port
from tests.scaled.cluster import PASSWORD, Cluster, children_running
from tests.scaled.servers import Postgres, Redis
from tests.scaled.wsclient import WebSocket

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(180)]

# Short leases so a dead worker is noticed within seconds (the default is 30 s).
LEASE_S = "4"
HEARTBEAT_S = "1"
READY_INSTANCE = """
import json, uuid
from hosts.models import InstanceState, ServerInstance, ServerProfile
profile = ServerProfile.objects.get(name="Simulated SGLang baseline")
instance = ServerInstance.objects.create(
    profile=profile, host=profile.host, port={port}, gpu_ids=[], state=InstanceState.READY,
    run_id="sd-scaled-" + uuid.uuid4().hex[:12], launch_argv=["python", "-m", "benchlib.simulator"],
)
print(json.dumps({{"id": instance.pk}}))
"""


@pytest.fixture
def cluster(tmp_path: Path, postgres_server: Postgres, redis_server: Redis) -> Iterator[Cluster]:
    database_url = postgres_server.create_database(f"specdash_{os.getpid()}_{free_port()}")
    env = {
        **os.environ,
        "SPECDASH_DATABASE_URL": database_url,
        "SPECDASH_REDIS_URL": redis_server.url,
        "SPECDASH_VAR_DIR": str(tmp_path),
        "SPECDASH_ENGINE_CACHE": str(tmp_path / "engines"),  # the simulated demo only
        "SPECDASH_DATA_DIR": str(tmp_path / "data"),
        "SPECDASH_DEMO_PASSWORD": PASSWORD,
        "SPECDASH_JOB_LEASE_S": LEASE_S,
        "SPECDASH_JOB_HEARTBEAT_S": HEARTBEAT_S,
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    board = Cluster(env=env, var=tmp_path)
    board.manage("migrate", "--no-input", "-v", "0")
    board.manage("seed_demo")
    try:
        yield board
    finally:
        board.stop()


@pytest.fixture
def simulator(tmp_path: Path) -> Iterator[Simulator]:
    # The baseline profile: ~90 tok/s per stream, so a level lasts its whole duration.
    sim = start_simulator(tmp_path, "--profile", "baseline")
    try:
        yield sim
    finally:
        sim.kill()


async def _login(client: httpx.AsyncClient) -> None:
    page = await client.get("/accounts/login/")
    token = client.cookies["csrftoken"]
    assert page.status_code == 200
    response = await client.post(
        "/accounts/login/",
        data={"username": "operator", "password": PASSWORD, "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 302, response.text[:500]
    assert "sessionid" in client.cookies


async def _launch_sweep(client: httpx.AsyncClient, instance_id: int) -> int:
    form = await client.get("/sweeps/new/")
    assert form.status_code == 200
    response = await client.post(
        "/sweeps/new/",
        data={
            "csrfmiddlewaretoken": client.cookies["csrftoken"],
            "instance": str(instance_id),
            "name": "scaled sweep",
            "levels": "1, 2, 3, 4, 5",
            "requests_per_level": "",
            "duration": "3",
            "warmup_requests": "0",
            "input_tokens": "32",
            "max_tokens": "24",
            "api": "completions",
            "ignore_eos": "on",
        },
    )
    assert response.status_code == 302, response.text[:2000]
    match = re.fullmatch(r"/sweeps/(\d+)/", response.headers["location"])
    assert match is not None, response.headers["location"]
    return int(match.group(1))


def _db_row(url: str, sql: str, *args: Any) -> tuple[Any, ...]:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql, args).fetchone()
    assert row is not None
    return tuple(row)


def _db_rows(url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return [tuple(r) for r in conn.execute(sql, args).fetchall()]


class Watch:
    """What a viewer connected to web 2 has seen so far."""

    def __init__(self, ws: WebSocket) -> None:
        self.ws = ws
        self.types: list[str] = []
        self.samples = 0
        self.levels: dict[int, str] = {}
        self.state = ""

    async def until(self, done: Any, deadline_s: float, what: str) -> None:
        deadline = time.monotonic() + deadline_s
        while not done(self):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"not seen within {deadline_s:.0f} s: {what}; {self.types}")
            message = await self.ws.receive(timeout=left)
            kind = message["type"]
            self.types.append(kind)
            assert kind != "closed", f"websocket closed: {message}"
            if kind == "sweep.samples":
                self.samples += len(message["samples"])
            elif kind == "sweep.level":
                self.levels[message["level"]["index"]] = message["level"]["state"]
            elif kind in ("sweep.state", "snapshot"):
                self.state = message["sweep"]["state"]


async def test_sweep_launched_on_web1_runs_on_one_worker_is_watched_on_web2_and_survives_its_worker_being_killed(
    cluster: Cluster, simulator: Simulator
) -> None:
    web1_port, web2_port = free_port(), free_port()
    cluster.start_web("web1", web1_port)
    cluster.start_web("web2", web2_port)
    workers = {name: cluster.start_worker(name) for name in ("worker-a", "worker-b")}
    out = cluster.manage("shell", "-c", READY_INSTANCE.format(port=simulator.port))
    instance_id = json.loads(out.strip().splitlines()[-1])["id"]
    db = cluster.env["SPECDASH_DATABASE_URL"]

    web1 = httpx.AsyncClient(base_url=f"http://127.0.0.1:{web1_port}", timeout=30)
    web2 = httpx.AsyncClient(base_url=f"http://127.0.0.1:{web2_port}", timeout=30)
    ws: WebSocket | None = None
    try:
        await _login(web1)
        sweep_id = await _launch_sweep(web1, instance_id)
        # A different login, on the other web process: nothing is shared but the database
        # and Redis.
        await _login(web2)
        ws = await WebSocket.connect(
            f"ws://127.0.0.1:{web2_port}/ws/sweeps/{sweep_id}/",
            cookie=f"sessionid={web2.cookies['sessionid']}",
            origin=f"http://127.0.0.1:{web2_port}",
        )
        watch = Watch(ws)
        await watch.until(lambda w: "snapshot" in w.types, 30, "the snapshot")

        # Live through web 2: samples and two finished levels, then the third one running.
        await watch.until(
            lambda w: (
                w.samples >= 3
                and w.levels.get(0) == "completed"
                and w.levels.get(1) == "completed"
                and w.levels.get(2) == "running"
            ),
            60,
            "samples, levels 0 and 1 completed and level 2 running",
        )
        owner, job_id, job_state = _db_row(
            db,
            "SELECT j.worker_id, j.id, j.state FROM hosts_job j "
            "JOIN benchmarks_sweep s ON s.job_id = j.id WHERE s.id = %s",
            sweep_id,
        )
        assert job_state == "running" and owner in workers, (owner, job_state)
        other = next(name for name in workers if name != owner)
        # Exactly one worker drives the sweep: only its process runs a load generator.
        assert children_running(workers[owner].pid, "benchlib.loadgen"), cluster.logs()
        assert not children_running(workers[other].pid, "benchlib.loadgen")

        os.kill(workers[owner].pid, signal.SIGKILL)
        workers[owner].process.wait(timeout=10)

        # The other worker sees the lease expire and marks the job and the sweep interrupted;
        # web 2 shows it, live.
        await watch.until(lambda w: w.state == "interrupted", 45, "the sweep interrupted")
        assert watch.levels.get(2) == "partial"
    finally:
        if ws is not None:
            ws.close()
        await web1.aclose()
        await web2.aclose()

    state, reason = _db_row(
        db, "SELECT state, reason FROM benchmarks_sweep WHERE id = %s", sweep_id
    )
    assert state == "interrupted" and owner in reason, reason
    job = _db_row(db, "SELECT state, error FROM hosts_job WHERE id = %s", job_id)
    assert job == ("interrupted", f"worker {owner} stopped renewing its lease")
    levels = _db_rows(
        db,
        "SELECT index, state, requests_ok, output_tok_s, summary FROM benchmarks_sweeplevel "
        "WHERE sweep_id = %s ORDER BY index",
        sweep_id,
    )
    assert [(row[0], row[1]) for row in levels[:3]] == [
        (0, "completed"),
        (1, "completed"),
        (2, "partial"),
    ]
    for index, _, requests_ok, tok_s, summary in levels[:2]:
        # The finished levels keep their measurements: the full summary, not just a state.
        assert requests_ok > 0 and tok_s > 0, (index, requests_ok, tok_s)
        assert summary["concurrency"] == index + 1 and summary["status"] == "completed"
    assert len(levels) == 3, "no level may start after the worker died"
    samples = _db_row(
        db, "SELECT count(*) FROM benchmarks_sweepsample WHERE sweep_id = %s", sweep_id
    )
    assert samples[0] >= watch.samples
