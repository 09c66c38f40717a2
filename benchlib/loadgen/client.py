from __future__ import annotations

# The HTTP clients and the request function.
#
# `send_request` never raises for a failed request: the failure goes into the record with a cause
# category (connect, timeout, http_<status>, disconnect, protocol, server_error, cancelled, other).
# Cancellation is the one exception that propagates, after the record has been filled in, so
# that the task really ends.
#
# The hot path is `Http1Client` (http1.py: asyncio's protocol layer, the request written in the
# turn it is sent, the body handed to the SSE decoder and the chunk handler inside
# `data_received`). An `httpx.AsyncClient` is still accepted (tests inject httpx's mock
# transport, library users may pass their own) and takes the httpx path below.
#
# A server may close a kept-alive connection between two requests (llama-server closes one after
# every streamed response, see `Connection.peer_spoke_while_idle`; any server closes one idle
# past its keep-alive timeout), and a request that goes out on it just then fails with "Server
# disconnected without sending a response": a race of connection reuse, not a failure of the
# server. The pool first drops an idle connection whose socket already holds the close (as
# httpcore and urllib3 do); what slips past that check (the close still in flight as the request
# is written) is sent once more, on a new connection, and `rec.retries` counts it (the level's
# `requests.retried`). Only when the connection had served an earlier request (no TCP connect in
# this attempt) and no response byte had arrived. Anything else is recorded as the failure it is.
#
# Why resending this POST is safe, when aiohttp resends only idempotent methods (RFC 9112
# 9.3.1) and urllib3 resends a POST only if it was never written: RFC 9112 allows a retry
# where the request is idempotent in effect, and a completion changes nothing on the server but
# its counters and caches. And the servers measured close a kept-alive connection only between
# two requests, from their keep-alive loop, before reading the next one (cpp-httplib's
# `process_server_socket_core`; uvicorn's keep-alive timer, which a request's first bytes
# cancel); a request they had read they answer, if only with an error status. So a close with
# no response byte on a reused connection came before our request was read, and the server never
# started on it. A server that read a request and then dropped the connection without a word
# would break that; the engine tests check each level's tokens against the server's own counter,
# which a request processed twice would exceed. The retry goes on a new connection, never on
# another pooled one: the pool's other connections may hold the same close in flight
# (llama-server closes every one after its response), and a second stale one would turn the
# race into an error (the flaky `disconnect` of one request in 520 against llama-server).
import asyncio
import json
import ssl
import time

import httpx

from benchlib.loadgen.apis import Api, ChunkHandler, TokenCounter, make_handler
from benchlib.loadgen.http1 import Http1Client, ProtocolViolation, ServerDisconnected
from benchlib.loadgen.records import RequestRecord
from benchlib.loadgen.sse import DONE, SSEDecoder

# json.loads(bytes) first sniffs the encoding; decoding to str ourselves is ~2.5x faster per chunk.
_DECODE = json.JSONDecoder().decode

ERROR_KINDS = (
    "connect",
    "timeout",
    "disconnect",
    "protocol",
    "server_error",
    "cancelled",
    "other",
)  # plus http_<status>

StreamClient = Http1Client | httpx.AsyncClient

# Headers every streamed request carries (the request id and category are added per request).
_FIXED_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "text/event-stream",
    "Accept-Encoding": "identity",
    "User-Agent": "specdash-loadgen",
}


def make_client(
    concurrency: int,
    *,
    request_timeout: float = 600.0,
    connect_timeout: float = 10.0,
    ssl_context: ssl.SSLContext | None = None,
) -> Http1Client:
    """The hot-path client for `concurrency` streams: one kept-alive connection per stream."""
    return Http1Client(
        concurrency,
        request_timeout=request_timeout,
        connect_timeout=connect_timeout,
        ssl_context=ssl_context,
    )


def make_httpx_client(
    concurrency: int,
    *,
    request_timeout: float = 600.0,
    connect_timeout: float = 10.0,
    ssl_context: ssl.SSLContext | None = None,
) -> httpx.AsyncClient:
    """An httpx AsyncClient sized for `concurrency` streams: one connection per stream, kept alive.

    httpx's defaults (100 connections, 5 s timeouts) would silently cap the concurrency and cut
    long generations, so every limit is set explicitly. The pool timeout is as long as a request
    may take, since waiting for a connection is never expected with this sizing.
    """
    size = concurrency + 4
    limits = httpx.Limits(
        max_connections=size, max_keepalive_connections=size, keepalive_expiry=60.0
    )
    timeout = httpx.Timeout(
        connect=connect_timeout, read=request_timeout, write=60.0, pool=request_timeout
    )
    # Loading the CA bundle costs ~15 ms a client: clients of one level share one context.
    verify = ssl_context if ssl_context is not None else httpx.create_ssl_context()
    # HTTP/1.1 only (one stream per connection, as the servers measured speak it); no proxies or
    # netrc from the environment (trust_env=False): a stray HTTP_PROXY would reroute loopback load.
    return httpx.AsyncClient(
        limits=limits, timeout=timeout, trust_env=False, verify=verify, http1=True, http2=False
    )


def _http_error_text(body: bytes) -> str:
    text = body[:500].decode("utf-8", errors="replace")
    try:
        obj = json.loads(body)
    except ValueError:
        return text
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("message", obj.get("detail")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return str(err)[:500]
    return text


async def send_request(
    client: StreamClient,
    *,
    api: Api,
    url: str,
    content: bytes,
    rec: RequestRecord,
    live: TokenCounter | None = None,
    total_timeout: float = 600.0,
) -> RequestRecord:
    """POST one streamed request and fill `rec` (its request_id becomes the X-Request-Id header).

    A request whose reused connection turns out closed before any response byte is sent once
    more (`rec.retries`); its `start` stays the first attempt's, so its latency includes it.
    """
    if isinstance(client, Http1Client):
        return await _send_http1(client, api, url, content, rec, live, total_timeout)
    headers = {**_FIXED_HEADERS, "X-Request-Id": rec.request_id}
    if rec.category is not None:
        # Engines ignore it; the simulator draws its acceptance from the prompt's category.
        headers["X-Specdash-Category"] = rec.category
    rec.start = time.perf_counter()
    for attempt in range(1 + MAX_STALE_RETRIES):
        trace = _Trace(rec)
        handler = make_handler(api, rec, live)
        stale = await _attempt(client, url, content, headers, trace, rec, handler, total_timeout)
        if stale is None:
            return rec
        if attempt == MAX_STALE_RETRIES or trace.connected or trace.answered:
            _fail(rec, "disconnect", stale)
            return rec
        rec.retries += 1
    return rec


def _header_value(value: str) -> bytes:
    # a CR or LF in a value would end the header early: request ids and categories never hold one
    return value.replace("\r", " ").replace("\n", " ").encode("latin-1", errors="replace")


class _Stream:
    """The body sink of one 200 response: SSE events to the chunk handler, inside the
    connection's `data_received`, each read stamped once by the connection."""

    __slots__ = ("decoder", "done", "handler", "last", "rec")

    def __init__(self, rec: RequestRecord, handler: ChunkHandler) -> None:
        self.rec = rec
        self.handler = handler
        self.decoder = SSEDecoder()
        self.done = False
        self.last = rec.start

    def body(self, data: bytes, now: float) -> None:
        self.last = now
        handler = self.handler
        fast = handler.handle_fast
        for payload in self.decoder.feed(data):
            if payload == DONE:
                self.done = True
                self.rec.end = now
            elif not fast(payload, now):
                handler.handle(_DECODE(payload.decode()), now)

    def finish(self) -> None:
        """At the end of a complete response: an unterminated last event, then the checks."""
        rec = self.rec
        handler = self.handler
        if not self.done:
            now = time.perf_counter()
            for payload in self.decoder.flush():
                if payload == DONE:
                    self.done = True
                else:
                    handler.handle(_DECODE(payload.decode()), now)
        if not self.done:
            rec.end = self.last
        handler.finish()
        if rec.error_kind is None and not self.done and rec.finish_reason is None:
            rec.error_kind = "protocol"
            rec.error = "stream ended without [DONE] or a finish reason"


async def _send_http1(
    client: Http1Client,
    api: Api,
    url: str,
    content: bytes,
    rec: RequestRecord,
    live: TokenCounter | None,
    total_timeout: float,
) -> RequestRecord:
    perf = time.perf_counter
    rec.start = perf()
    try:
        target = client.target(url, _FIXED_HEADERS)
    except ValueError as exc:
        _fail(rec, "connect", exc)
        return rec
    head = [target.head, b"X-Request-Id: ", _header_value(rec.request_id), b"\r\n"]
    if rec.category is not None:
        # Engines ignore it; the simulator draws its acceptance from the prompt's category.
        head += [b"X-Specdash-Category: ", _header_value(rec.category), b"\r\n"]
    head.append(b"Content-Length: %d\r\n\r\n" % len(content))
    head.append(content)
    request = b"".join(head)
    loop = asyncio.get_running_loop()
    for attempt in range(1 + MAX_STALE_RETRIES):
        handler = make_handler(api, rec, live)
        stream = _Stream(rec, handler)
        # a retry never takes a pooled connection: it may be as stale as the one just lost
        conn = client.take(target) if attempt == 0 else None
        reused = conn is not None
        try:
            async with asyncio.timeout(total_timeout):
                if conn is None:
                    try:
                        conn = await client.connect(target)
                    except (OSError, TimeoutError) as exc:
                        _fail(rec, "connect", exc)
                        return rec
                done: asyncio.Future[None] = loop.create_future()
                rec.sent = perf()
                conn.send(request, stream.body, done)
                rec.written = perf()
                await done
        except asyncio.CancelledError:
            if conn is not None:
                client.discard(conn)
            rec.end = perf()
            rec.error_kind = "cancelled"
            rec.error = "cancelled"
            handler.finish()
            raise
        except ServerDisconnected as exc:
            assert conn is not None
            client.discard(conn)
            if not conn.got_bytes and reused and attempt < MAX_STALE_RETRIES:
                rec.retries += 1
                continue
            _fail(rec, "disconnect", exc)
            if conn.got_bytes:
                handler.finish()
            return rec
        except TimeoutError as exc:
            if conn is not None:
                client.discard(conn)
            _fail(rec, "timeout", exc)
            handler.finish()
            return rec
        except (ProtocolViolation, ValueError, KeyError, TypeError, AttributeError) as exc:
            if conn is not None:
                client.discard(conn)
            _fail(rec, "protocol", exc)
            handler.finish()
            return rec
        except Exception as exc:  # a request must never take the level down
            if conn is not None:
                client.discard(conn)
            _fail(rec, "other", exc)
            handler.finish()
            return rec
        if conn.status != 200:
            rec.end = perf()
            rec.error_kind = f"http_{conn.status}"
            rec.error = _http_error_text(bytes(conn.error_body))
        else:
            try:
                stream.finish()
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                _fail(rec, "protocol", exc)
        client.give_back(target, conn)
        return rec
    return rec


# One retry, on a new connection: if that one too is closed before a response, the server is
# refusing requests, not racing a reuse, and that is for the record to show.
MAX_STALE_RETRIES = 1


class _Trace:
    """httpcore's trace hook for one attempt: a few calls per request, none per chunk."""

    __slots__ = ("answered", "connected", "rec")

    def __init__(self, rec: RequestRecord) -> None:
        self.rec = rec
        self.connected = False  # a TCP connect happened: the connection was not reused
        self.answered = False  # response headers began to arrive

    async def __call__(self, event: str, info: object) -> None:
        if event == "http11.send_request_headers.started":
            self.rec.sent = time.perf_counter()
        elif event == "http11.send_request_body.complete":
            self.rec.written = time.perf_counter()
        elif event == "connection.connect_tcp.started":
            self.connected = True
        elif event == "http11.receive_response_headers.complete":
            self.answered = True


async def _attempt(
    client: httpx.AsyncClient,
    url: str,
    content: bytes,
    headers: dict[str, str],
    trace: _Trace,
    rec: RequestRecord,
    handler: ChunkHandler,
    total_timeout: float,
) -> httpx.TransportError | None:
    """One try. Returns the error when the connection closed before any response (nothing is
    recorded then: the caller retries or records it), else None with `rec` filled in."""
    perf = time.perf_counter
    loads = _DECODE
    handle = handler.handle
    fast = handler.handle_fast
    done = False
    responded = False
    now = rec.start
    try:
        async with (
            asyncio.timeout(total_timeout),
            client.stream(
                "POST", url, content=content, headers=headers, extensions={"trace": trace}
            ) as resp,
        ):
            responded = True
            if resp.status_code != 200:
                body = await resp.aread()
                rec.end = perf()
                rec.error_kind = f"http_{resp.status_code}"
                rec.error = _http_error_text(body)
                return None
            decoder = SSEDecoder()
            feed = decoder.feed
            async for raw in resp.aiter_raw():
                now = perf()
                for payload in feed(raw):
                    if payload == DONE:
                        done = True
                        rec.end = now
                    elif not fast(payload, now):
                        handle(loads(payload.decode()), now)
            if not done:
                now = perf()
                for payload in decoder.flush():
                    if payload == DONE:
                        done = True
                    else:
                        handle(loads(payload.decode()), now)
        if not done:
            rec.end = now
        handler.finish()
        if rec.error_kind is None and not done and rec.finish_reason is None:
            rec.error_kind = "protocol"
            rec.error = "stream ended without [DONE] or a finish reason"
    except asyncio.CancelledError:
        rec.end = perf()
        rec.error_kind = "cancelled"
        rec.error = "cancelled"
        handler.finish()
        raise
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        _fail(rec, "connect", exc)
    except (TimeoutError, httpx.TimeoutException) as exc:
        _fail(rec, "timeout", exc)
        handler.finish()
    except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as exc:
        if not responded:
            return exc  # closed before any response: "Server disconnected without sending..."
        kind = "protocol" if isinstance(exc, httpx.RemoteProtocolError) else "disconnect"
        _fail(rec, kind, exc)
        handler.finish()
    except httpx.CloseError as exc:
        _fail(rec, "disconnect", exc)
        handler.finish()
    except (httpx.ProtocolError, ValueError, KeyError, TypeError, AttributeError) as exc:
        _fail(rec, "protocol", exc)
        handler.finish()
    except Exception as exc:  # a request must never take the level down
        _fail(rec, "other", exc)
        handler.finish()
    return None


def _fail(rec: RequestRecord, kind: str, exc: BaseException) -> None:
    rec.end = time.perf_counter()
    rec.error_kind = kind
    rec.error = f"{type(exc).__name__}: {exc}"[:500]
