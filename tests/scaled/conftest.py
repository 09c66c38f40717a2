"""Fixtures of the scaled-mode tests: a real redis-server and a real PostgreSQL, started on
free ports in temporary directories and stopped afterwards. Missing binaries fail the test
(with the command that installs them), they never skip it."""

from __future__ import annotations

from collections.abc import Generator, Iterator

import pytest

from tests.scaled.cluster import Cluster
from tests.scaled.servers import Postgres, Redis, start_postgres, start_redis


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed scaled test shows the logs of its web and worker processes: the cause of what
    the test saw (a websocket closed with 1011, a job that never ran) is only in them."""
    report = yield
    cluster = getattr(item, "funcargs", {}).get("cluster")
    if report.failed and isinstance(cluster, Cluster):
        report.sections.append((f"scaled processes ({report.when})", cluster.logs()))
    return report


@pytest.fixture(scope="module")
def redis_server() -> Iterator[Redis]:
    server = start_redis()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def postgres_server() -> Iterator[Postgres]:
    server = start_postgres()
    try:
        yield server
    finally:
        server.stop()
