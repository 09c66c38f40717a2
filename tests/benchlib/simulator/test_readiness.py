"""specdash's readiness probe (hosts/lifecycle/readiness.py) against SGLang's health semantics,
as the simulator's SGLang mode gives them (tests/benchlib/simulator/test_health.py)."""

from __future__ import annotations

import dataclasses
import time

import httpx

from hosts.lifecycle.readiness import ReadinessTarget, check_ready

from .test_protocol import make_app

INTERVAL = 0.2
TARGET = ReadinessTarget(
    base_url="http://sim",
    health_path="/health",
    expected_status=200,
    openai_base_path="/v1",
    model="specdash-sim",
)


def _client(app: object, timeout: float = 10.0) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, timeout=timeout)


async def test_not_ready_during_warm_up_then_ready_once_health_has_seen_output() -> None:
    app = make_app(health_check_interval_s=INTERVAL)
    async with _client(app) as client:
        result = await check_ready(client, TARGET)
        assert (result.ready, result.stage) == (False, "health")
        assert result.detail == "/health answered 503"
        await app.warm_up()
        started = time.monotonic()
        result = await check_ready(client, TARGET)
        assert (result.ready, result.stage) == (True, "ready")
        # The probe pays the engine's own wait, nothing more.
        assert INTERVAL <= time.monotonic() - started < INTERVAL + 0.5


async def test_a_health_check_that_never_answers_in_time_is_a_health_failure_not_connect() -> None:
    # SGLang's /health holds the call until output (503 only after 20 s): the client's read
    # timeout ends it first. That is the health verdict pending, not a connection failure.
    def reply(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health":
            raise httpx.ReadTimeout("timed out", request=request)
        raise httpx.ConnectError("refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(reply)) as client:
        result = await check_ready(client, TARGET)
        assert (result.ready, result.stage) == (False, "health")
        assert result.detail == "/health gave no answer in time (ReadTimeout)"
        refused = await check_ready(client, dataclasses.replace(TARGET, health_path="/other"))
    assert (refused.ready, refused.stage) == (False, "connect")
