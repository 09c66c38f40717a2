from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from benchlib.loadgen.wire import GenerateMetaInfo, SpecTokensDetails

from .asgi_types import Receive, Scope, Send
from .encode import DONE, StreamEncoder, generate_chunk, generate_json, generate_meta, openai_body
from .protocol import GenRequest
from .scheduler import SimRequest

if TYPE_CHECKING:
    from .app import SimApp


SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
JSON_HEADERS = [(b"content-type", b"application/json")]


def category_from(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"x-specdash-category" and value:
            return str(value.decode("latin-1"))[:40]
    return None


def request_id_from(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id" and value:
            return str(value.decode("latin-1"))
    return uuid.uuid4().hex


@dataclass(slots=True)
class _Answer:
    """One request's answer under way: the request, where its bytes go, the headers it adds,
    and the send time and token count of each event sent (`serve_generation` reports them)."""

    send: Send
    req: GenRequest
    sim: SimRequest
    headers: list[tuple[bytes, bytes]]
    chunks: list[list[float]] = field(default_factory=list)


async def _watch_disconnect(app: SimApp, receive: Receive, sim: SimRequest) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            app.scheduler.abort(sim)
            return


async def serve_generation(
    app: SimApp, scope: Scope, receive: Receive, send: Send, req: GenRequest
) -> None:
    """Queue one request on the scheduler and answer it, streaming one SSE event per step."""
    request_id = request_id_from(scope)
    arrival = time.time()
    overhead = app.config.request_overhead_ms / 1000.0
    if overhead > 0:
        await asyncio.sleep(overhead)
    target, reason = app.core.target_length(req.max_tokens, req.ignore_eos)
    sim = SimRequest(
        request_id=request_id,
        prompt_tokens=req.prompt_tokens,
        max_tokens=req.max_tokens,
        target=target,
        target_reason=reason,
        arrival=arrival,
        loop=asyncio.get_running_loop(),
        category=category_from(scope),
        cached_tokens=app.cached_tokens(req.prefixes),
        # Reasoning mode applies to streamed chat (encode.StreamEncoder).
        reasoning_tokens=app.config.reasoning_tokens if req.kind == "chat" and req.stream else 0,
        sampled=req.sampled,
    )
    app.scheduler.submit(sim)
    app.live.add(sim)
    watcher = asyncio.ensure_future(_watch_disconnect(app, receive, sim))
    answer = _Answer(send, req, sim, headers=[(b"x-request-id", request_id.encode("latin-1"))])
    error: str | None = None
    try:
        if not req.stream:
            await _unary(app, answer)
        elif req.kind == "generate":
            await _stream_generate(answer)
        else:
            await _stream_openai(
                answer,
                sglang=app.config.metrics_style != "vllm",
                reasoning_tokens=app.config.reasoning_tokens,
            )
    except asyncio.CancelledError:
        error = "server shutdown" if app.stopping else "cancelled"
        raise
    finally:
        watcher.cancel()
        if not sim.done:
            app.scheduler.abort(sim)
        if sim.finish_reason == "abort" and error is None:
            error = app.abort_reason
        app.live.discard(sim)
        app.request_finished(sim, answer.chunks, error, reasoning_tokens=sim.reasoning_tokens)


def spec_meta(sim: SimRequest) -> SpecTokensDetails:
    """SGLang's per-request speculative figures on a finished request's meta_info (none without
    speculation): verify steps, proposed and correct drafts, their ratios."""
    if not sim.done or not sim.spec_steps:
        return SpecTokensDetails()
    return SpecTokensDetails(
        spec_verify_ct=sim.spec_steps,
        spec_accept_length=sim.generated / sim.spec_steps,
        spec_accept_rate=sim.spec_accepted / sim.spec_drafted if sim.spec_drafted else 0.0,
        spec_num_correct_drafts=sim.spec_accepted,
        spec_num_proposed_drafts=sim.spec_drafted,
    )


async def _unary(app: SimApp, answer: _Answer) -> None:
    # Nothing is sent before the end: the chunks record when the engine produced the tokens.
    req, sim = answer.req, answer.sim
    while True:
        n = await sim.take()
        if n:
            answer.chunks.append([time.time(), n])
        if sim.done:
            break
    reason = sim.finish_reason or "abort"
    created = int(sim.arrival)
    if req.kind == "generate":
        meta = generate_meta(req, sim.request_id, sim.generated, reason, time.time() - sim.arrival)
        meta = GenerateMetaInfo(**meta, **spec_meta(sim))
        body = generate_json(sim.generated, meta)
    else:
        body = openai_body(req, sim.request_id, created, sim.generated, reason)
    headers = JSON_HEADERS + answer.headers
    await answer.send({"type": "http.response.start", "status": 200, "headers": headers})
    await answer.send({"type": "http.response.body", "body": body})


async def _stream_openai(answer: _Answer, *, sglang: bool, reasoning_tokens: int = 0) -> None:
    req, sim = answer.req, answer.sim
    encoder = StreamEncoder(
        req, sim.request_id, int(sim.arrival), sglang=sglang, reasoning_tokens=reasoning_tokens
    )
    pos = 0

    def chunk(n: int, final: bool) -> bytes:
        nonlocal pos
        body = encoder.chunk(pos, n, sim.finish_reason if final else None)
        pos += n
        return body

    def tail() -> bytes:
        # After the last token: SGLang's sglext chunk (when asked for and the request was
        # speculative), the usage chunk (when asked for), then [DONE].
        out = b""
        if sglang and req.spec_details and (details := spec_meta(sim)):
            out += encoder.sglext_chunk(details)
        if req.include_usage:
            out += encoder.usage_chunk(pos)
        return out + DONE

    await _stream_events(answer, chunk, tail)


async def _stream_generate(answer: _Answer) -> None:
    req, sim = answer.req, answer.sim
    pos = 0

    def chunk(n: int, final: bool) -> bytes:
        nonlocal pos
        pos += n
        reason = sim.finish_reason if final else None
        return generate_chunk(req, sim.request_id, pos, reason, spec_meta(sim))

    await _stream_events(answer, chunk, lambda: DONE)


async def _stream_events(
    answer: _Answer, chunk: Callable[[int, bool], bytes], tail: Callable[[], bytes]
) -> None:
    """Stream the request's tokens as the engine produces them: `chunk(n, final)` is the event
    for n new tokens, `tail()` what follows the last one (sent alone where the engine ends
    with no new token). Each event's send time and token count go into `answer.chunks`."""
    send, sim, chunks = answer.send, answer.sim, answer.chunks
    headers = SSE_HEADERS + answer.headers
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    take = sim.take
    while True:
        n = await take()
        final = sim.done
        if n == 0:
            await send({"type": "http.response.body", "body": tail(), "more_body": False})
            return
        body = chunk(n, final)
        if final:
            body += tail()
        t = time.time()
        await send({"type": "http.response.body", "body": body, "more_body": not final})
        chunks.append([t, n])
        if final:
            return
