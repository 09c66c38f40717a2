"""The simulator's health endpoint in SGLang mode, as SGLang 0.5.23's (docs/engines.md,
"SGLang"): `/health` and `/health_generate` are one handler, 503 until the warm-up generation
succeeded, then each call waits ~1 s and (by default, SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION)
runs a 1-token generation, 503 after SGLANG_HEALTH_CHECK_TIMEOUT (20 s) without output. SGLang
marks its health-check request `log_metrics=False`; the simulator keeps it, and the warm-up, out
of the counters, histograms and truth log."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from benchlib.simulator.app import SimApp
from benchlib.simulator.cli import health_settings, parse_config
from benchlib.simulator.profiles import PROFILES

from .conftest import call
from .test_protocol import make_app

INTERVAL = 0.2


def _app(tmp_path: Path | None = None, **changes: object) -> SimApp:
    return make_app(tmp_path, health_check_interval_s=INTERVAL, **changes)


async def _timed(app: SimApp, path: str) -> tuple[int, float]:
    t = time.monotonic()
    reply = await call(app, "GET", path)
    return reply.status, time.monotonic() - t


async def test_health_is_503_until_the_warm_up_then_each_call_waits_for_output() -> None:
    app = _app()
    for path in ("/health", "/health_generate"):
        status, took = await _timed(app, path)
        assert (status, took < INTERVAL / 2) == (503, True)  # at once, before the warm-up
    # Generation requests are served meanwhile (SGLang's HTTP server takes them).
    reply = await call(app, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
    assert reply.status == 200
    await app.warm_up()
    for path in ("/health", "/health_generate"):
        status, took = await _timed(app, path)
        assert status == 200
        assert INTERVAL <= took < 3 * INTERVAL


async def test_health_generations_stay_out_of_counters_histograms_and_truth_log(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path, profile=PROFILES["eagle3"].replace(t0_ms=0.1, k_ms=0.0))
    await app.warm_up()
    await call(app, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 5})
    before, steps = (await call(app, "GET", "/metrics")).body, app.core.steps
    for _ in range(3):
        assert (await call(app, "GET", "/health")).status == 200
    after = (await call(app, "GET", "/metrics")).body
    assert app.core.steps >= steps + 3  # each idle check ran its own generation
    assert after == before  # no counter, histogram (or idle gauge) moved
    truth = [json.loads(line) for line in (tmp_path / "truth.jsonl").read_text().splitlines()]
    assert len(truth) == 1  # the one real request


async def test_a_busy_server_runs_no_health_generation() -> None:
    app = _app(profile=PROFILES["baseline"])
    await app.warm_up()
    asked: list[str] = []
    original = app.generate_internal

    async def recording(prefix: str) -> None:
        asked.append(prefix)
        await original(prefix)

    app.generate_internal = recording  # type: ignore[method-assign,unused-ignore]
    body = {"prompt": "x", "max_tokens": 100, "ignore_eos": True}
    load = asyncio.ensure_future(call(app, "POST", "/v1/completions", body))
    while not app.core.running:
        await asyncio.sleep(0.005)
    assert (await call(app, "GET", "/health")).status == 200
    assert asked == []
    await load
    assert (await call(app, "GET", "/health")).status == 200
    assert asked == ["HEALTH_CHECK"]


async def test_health_is_503_after_the_timeout_when_the_scheduler_gives_no_output() -> None:
    app = _app(health_check_timeout_s=3 * INTERVAL)
    await app.warm_up()
    # A stuck scheduler: requests are queued but no step ever runs.
    app.scheduler.submit = app.core.submit  # type: ignore[method-assign,unused-ignore]
    status, took = await _timed(app, "/health_generate")
    assert status == 503
    assert took >= 3 * INTERVAL


async def test_with_health_generation_off_health_answers_at_once_but_health_generate_waits() -> (
    None
):
    app = _app(health_generation=False)
    assert (await _timed(app, "/health"))[0] == 503  # still 503 before the warm-up
    await app.warm_up()
    status, took = await _timed(app, "/health")
    assert (status, took < INTERVAL / 2) == (200, True)
    status, took = await _timed(app, "/health_generate")
    assert (status, took >= INTERVAL) == (200, True)


async def test_vllm_mode_health_answers_at_once_without_warm_up() -> None:
    status, took = await _timed(_app(metrics_style="vllm"), "/health")
    assert (status, took < INTERVAL / 2) == (200, True)


def test_sglang_environment_switches_are_read_at_start() -> None:
    assert health_settings({}) == {}
    env = {"SGLANG_HEALTH_CHECK_TIMEOUT": "5", "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0"}
    assert health_settings(env) == {"health_check_timeout_s": 5.0, "health_generation": False}
    config = parse_config([])
    assert (config.health_check_interval_s, config.health_generation) == (1.0, True)
