from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from .asgi_types import Receive, Scope, Send
from .config import SimConfig
from .generation import JSON_HEADERS, serve_generation
from .metrics import EngineMetrics
from .protocol import ApiError, Limits, load_json_object, parse_generate, parse_openai
from .scheduler import AsyncScheduler, SchedulerCore, SimRequest
from .server_info import server_info
from .truth import DraftLengthSwitch, RequestTruth, TruthLog

log = logging.getLogger("specdash.sim")

VERSION = "0.0.0-specdash-sim"
MAX_BODY = 64 * 1024 * 1024
PREFIX_CACHE_ENTRIES = 100_000  # message prefixes kept (--prefix-cache), least recent dropped

_GET, _POST = ("GET", "HEAD"), ("POST",)
ROUTES: dict[str, tuple[str, ...]] = {
    "/health": _GET,
    "/health_generate": _GET,
    "/v1/models": _GET,
    "/server_info": _GET,
    "/get_server_info": _GET,
    "/model_info": _GET,
    "/get_model_info": _GET,
    "/version": _GET,
    "/metrics": _GET,
    "/flush_cache": ("POST", "GET"),
    "/v1/completions": _POST,
    "/v1/chat/completions": _POST,
    "/generate": _POST,
}


class SimApp:
    """The simulated engine's ASGI application (HTTP only; lifespan is acknowledged)."""

    def __init__(self, config: SimConfig, *, on_crash: Callable[[], None] | None = None) -> None:
        self.config = config
        self.core = SchedulerCore(
            config.profile,
            seed=config.seed,
            eos_prob=config.eos_prob,
            speculation=config.speculation,
        )
        self.metrics = EngineMetrics(config.model, config.metrics_style, config.ranks)
        self.truth = TruthLog(config.truth_log)
        # Kept apart from the per-request truth log, whose readers take every line for a request.
        self.controller_truth = TruthLog(config.controller_log if config.speculation else None)
        self.scheduler = AsyncScheduler(self.core, on_switch=self.draft_length_switched)
        # Chat message-prefix digests seen (--prefix-cache), oldest first, bounded.
        self.prefix_cache: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self.limits = Limits(config.model, config.max_model_len, config.default_max_tokens)
        self.ready = True
        # SGLang answers /health 503 until its warm-up generation has succeeded (`warm_up`);
        # vLLM's /health has no such stage.
        self.warmed = config.metrics_style == "vllm"
        self.started = time.time()
        self.completed = 0
        self.crash_armed = False
        self.live: set[SimRequest] = set()
        self.abort_reason: str | None = "client disconnected"
        self.stopping = False
        self.on_crash = on_crash
        self._tasks: set[asyncio.Future[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        try:
            methods = ROUTES.get(path)
            if path == "/version" and self.config.metrics_style != "vllm":
                # SGLang 0.5.23 has no /version (srt/entrypoints/http_server.py); vLLM does.
                methods = None
            if methods is None:
                raise ApiError(
                    404, f"Route {path} not found.", type_="NotFoundError", code="not_found"
                )
            if method not in methods:
                raise ApiError(
                    405,
                    f"Method {method} not allowed.",
                    type_="MethodNotAllowed",
                    code="method_not_allowed",
                )
            await self._dispatch(path, scope, receive, send)
        except ApiError as exc:
            headers = list(JSON_HEADERS)
            if exc.status == 405:
                headers.append((b"allow", ", ".join(ROUTES[path]).encode()))
            await _respond(send, exc.status, exc.body(), headers)

    def _unavailable(self) -> ApiError:
        return ApiError(
            503,
            "The server is loading the model.",
            type_="ServiceUnavailable",
            code="service_unavailable",
        )

    async def _dispatch(self, path: str, scope: Scope, receive: Receive, send: Send) -> None:
        if path in ("/v1/completions", "/v1/chat/completions", "/generate"):
            data = load_json_object(await _read_body(receive))
            if self.crash_armed:
                # The crash fault fired: the process exits within moments. A request that
                # arrives meanwhile must die with it, not complete (a fast profile would
                # otherwise finish a whole level in that time).
                await asyncio.Event().wait()
            if not self.ready:
                raise self._unavailable()
            if path == "/generate":
                req = parse_generate(data, self.limits)
            else:
                req = parse_openai("chat" if "chat" in path else "completions", data, self.limits)
            await serve_generation(self, scope, receive, send, req)
        elif path in ("/health", "/health_generate") and self.config.metrics_style != "vllm":
            ok = await self._sglang_health(path)
            await _respond(send, 200 if ok else 503, b"", [(b"content-type", b"text/plain")])
        elif path in ("/health", "/health_generate"):
            if not self.ready or (path == "/health_generate" and not self._scheduler_ok()):
                raise self._unavailable()
            await _respond(send, 200, b"", [(b"content-type", b"text/plain")])
        elif path == "/metrics":
            body = self.metrics.render(self.core)
            names = _requested_families(scope.get("query_string", b""))
            if names:
                body = restrict_families(body, names)
            await _respond(send, 200, body, [(b"content-type", b"text/plain; version=0.0.4")])
        elif path == "/flush_cache":
            await _read_body(receive)
            if self.core.running or self.core.queue:
                await _respond(send, 400, b"Cache not flushed: requests are running.", [])
            else:
                await _respond(send, 200, b"Cache flushed.", [(b"content-type", b"text/plain")])
        else:
            await _json(send, self._info(path))

    async def _sglang_health(self, path: str) -> bool:
        """SGLang's one health handler for both paths (docs/engines.md, "SGLang"): 503 at once
        until the warm-up succeeded; then sleep ~1 s and answer 200 if the scheduler produced
        any output since the call began, else sleep again, and 503 after the timeout. An idle
        scheduler gets a 1-token generation to produce that output; a busy one none. With
        SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION off, /health answers 200 at once."""
        cfg, core = self.config, self.core
        if self.stopping or not self.ready or not self.warmed:
            return False
        if path == "/health" and not cfg.health_generation:
            return True
        steps = core.steps
        if not core.running and not core.queue:
            task = asyncio.ensure_future(self.generate_internal("HEALTH_CHECK"))
            self._tasks.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self._tasks.discard)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + cfg.health_check_timeout_s
        while loop.time() < deadline:
            await asyncio.sleep(cfg.health_check_interval_s)
            if core.steps > steps:
                return True
        log.error("Health check failed: no scheduler output for %g s", cfg.health_check_timeout_s)
        return False

    async def generate_internal(self, prefix: str) -> None:
        """A 1-token generation of the server's own (warm-up, health check). Like SGLang's
        health-check request (`log_metrics=False`) it stays out of the Prometheus counters and
        histograms and out of the truth log: it never passes `request_finished`."""
        sim = SimRequest(
            request_id=f"{prefix}_{time.time()}",
            prompt_tokens=1,
            max_tokens=1,
            target=1,
            target_reason="length",
            arrival=time.time(),
            loop=asyncio.get_running_loop(),
        )
        self.scheduler.submit(sim)
        while not sim.done:
            await sim.take()

    async def warm_up(self) -> None:
        """After load, as SGLang does: one warm-up generation; /health is 503 until it is done."""
        await self.generate_internal("WARMUP")
        self.warmed = True

    def _scheduler_ok(self) -> bool:
        # The loop starts with the first request; before that an idle scheduler is healthy.
        return self.scheduler.alive or self.core.steps == 0

    def _info(self, path: str) -> Any:
        cfg = self.config
        if path == "/v1/models":
            model = {
                "id": cfg.model,
                "object": "model",
                "created": int(self.started),
                "owned_by": "specdash-sim",
                "root": cfg.model,
                "max_model_len": cfg.max_model_len,
            }
            return {"object": "list", "data": [model]}
        if path in ("/model_info", "/get_model_info"):
            return {"model_path": cfg.model, "tokenizer_path": cfg.model, "is_generation": True}
        if path == "/version":
            return {"version": VERSION}
        return server_info(self, VERSION)

    def cached_tokens(self, prefixes: tuple[tuple[bytes, int], ...]) -> int:
        """The prompt tokens a prefix cache holds for these message prefixes (the longest one
        seen before), and remember them all; 0 with the cache off."""
        if not self.config.prefix_cache:
            return 0
        cache = self.prefix_cache
        cached = 0
        for digest, tokens in prefixes:
            if digest in cache:
                cached = tokens
                cache.move_to_end(digest)
            else:
                cache[digest] = tokens
        while len(cache) > PREFIX_CACHE_ENTRIES:
            cache.popitem(last=False)
        return cached

    def request_finished(
        self,
        sim: SimRequest,
        chunks: list[list[float]],
        error: str | None,
        *,
        reasoning_tokens: int = 0,
    ) -> None:
        finish = time.time()
        reason = sim.finish_reason or "abort"
        truth = RequestTruth(
            request_id=sim.request_id,
            arrival=sim.arrival,
            admitted=sim.admitted,
            first_token=chunks[0][0] if chunks else None,
            chunks=chunks,
            finish=finish,
            prompt_tokens=sim.prompt_tokens,
            completion_tokens=sim.generated,
            finish_reason=reason,
            error=error,
        )
        if reasoning_tokens:
            # A step that starts in the reasoning counts there whole, though its last tokens
            # may be the answer's.
            truth["reasoning_tokens"] = min(reasoning_tokens, sim.generated)
            truth["reasoning_verify_steps"] = sim.phase_steps[0]
            truth["reasoning_step_tokens"] = sim.phase_steps[1]
            truth["answer_verify_steps"] = sim.phase_steps[2]
            truth["answer_step_tokens"] = sim.phase_steps[3]
        if self.config.prefix_cache:
            truth["cached_tokens"] = sim.cached_tokens
        if sim.sampled:  # its drafts were accepted at the sampled rate
            truth["sampled"] = True
        if self.core.speculation:
            # Which draft length each of its verify steps used, and the running batch it was
            # chosen from.
            truth["decode_steps"] = sim.decode_steps
        if sim.spec_steps:
            # What per-level acceptance is checked on.
            truth["spec_verify_steps"] = sim.spec_steps
            truth["spec_drafted"] = sim.spec_drafted
            truth["spec_accepted"] = sim.spec_accepted
        self.truth.write(truth)
        self.metrics.observe_request(
            sim.arrival,
            chunks,
            finish,
            reason,
            prompt_tokens=sim.prompt_tokens,
            generated=sim.generated,
            verify_steps=sim.steps,
        )
        if reason != "abort":
            self.completed += 1
            limit = self.config.crash_after_requests
            if limit and self.completed == limit and self.on_crash is not None:
                self.crash_armed = True
                self.on_crash()

    def draft_length_switched(self, t: float, before: int, after: int, batch: int) -> None:
        self.controller_truth.write(
            DraftLengthSwitch({"t": t, "from": before, "to": after, "batch": batch})
        )

    def abort_all(self, reason: str) -> None:
        self.stopping = True
        self.abort_reason = reason
        for sim in list(self.live):
            self.scheduler.abort(sim)

    def tick(self) -> None:
        self.metrics.tick(self.core, time.monotonic())


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _read_body(receive: Receive) -> bytes:
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ApiError(400, "Client disconnected.", code="disconnected")
        part = message.get("body", b"")
        size += len(part)
        if size > MAX_BODY:
            raise ApiError(413, "Request body too large.", code="too_large")
        parts.append(part)
        if not message.get("more_body", False):
            return b"".join(parts)


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _json(send: Send, data: Any) -> None:
    await _respond(send, 200, json.dumps(data).encode(), list(JSON_HEADERS))


def _requested_families(query_string: bytes) -> set[str]:
    """The ``name[]`` parameters of a /metrics request: prometheus_client, which serves
    SGLang's and vLLM's /metrics, answers with those families only when any are given."""
    pairs = urllib.parse.parse_qsl(query_string.decode("latin-1"))
    return {value for key, value in pairs if key == "name[]"}


def restrict_families(body: bytes, names: set[str]) -> bytes:
    """The exposition text cut to the families in ``names`` (their HELP, TYPE and samples)."""
    kept: list[bytes] = []
    for line in body.splitlines(keepends=True):
        if line.startswith(b"# "):
            parts = line.split(b" ", 3)
            family = parts[2].decode() if len(parts) > 2 else ""
        else:
            family = line.split(b"{", 1)[0].split(b" ", 1)[0].decode()
        if family in names:
            kept.append(line)
    return b"".join(kept)
