"""Fixtures of the scaled-mode tests: a real redis-server and a real PostgreSQL, started on
free ports in temporary directories and stopped afterwards. Missing binaries fail the test
(with the command that installs them), they never skip it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.scaled.servers import Postgres, Redis, start_postgres, start_redis


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
