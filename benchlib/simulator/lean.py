from __future__ import annotations

# A lean HTTP/1.1 server for the simulator's ASGI app, on asyncio's transport/protocol layer
# (`--http lean`). It serves exactly what the app needs: one request per connection at a time
# (keep-alive, pipelined requests wait their turn), Content-Length or chunked request bodies,
# chunked streamed responses, `http.disconnect` on a closed connection. Each ASGI `send` of a
# body is one `transport.write` in the caller's own turn: no queue, no task, no thread between
# the app and the socket (docs/simulator.md, "HTTP server").
import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Callable
from urllib.parse import unquote

from .asgi_types import App, Message, Scope

log = logging.getLogger("specdash.sim")


MAX_HEAD = 64 * 1024
_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    404: b"Not Found",
    405: b"Method Not Allowed",
    413: b"Request Entity Too Large",
    500: b"Internal Server Error",
    503: b"Service Unavailable",
}
_SERVER = b"server: specdash-sim\r\n"


class _BadRequest(Exception):
    pass


def _parse_head(head: bytes) -> tuple[str, bytes, str, list[tuple[bytes, bytes]]]:
    lines = head.split(b"\r\n")
    try:
        method, target, version = lines[0].split(b" ")
    except ValueError:
        raise _BadRequest from None
    if not version.startswith(b"HTTP/1."):
        raise _BadRequest
    headers: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise _BadRequest
        headers.append((name.lower(), value.strip()))
    return method.decode("ascii"), target, version[5:].decode("ascii"), headers


class _Exchange:
    """One request and its response: the ASGI receive and send callables."""

    __slots__ = (
        "body",
        "chunked",
        "conn",
        "done",
        "head",
        "keep_alive",
        "response_headers",
        "scope",
        "sent_head",
        "started",
        "status",
    )

    def __init__(self, conn: HttpProtocol, scope: Scope, keep_alive: bool) -> None:
        self.conn = conn
        self.scope = scope
        self.keep_alive = keep_alive
        self.body: bytes | None = None  # the request body, until the app has read it
        self.head = scope["method"] == "HEAD"
        self.started = False
        self.chunked = False
        self.done = False
        self.sent_head = False
        self.status = 500
        self.response_headers: list[tuple[bytes, bytes]] = []

    async def receive(self) -> Message:
        body = self.body
        if body is not None:
            self.body = None
            return {"type": "http.request", "body": body, "more_body": False}
        conn = self.conn
        while not conn.closed and not (self.done and conn.current is not self):
            waiter = conn.loop.create_future()
            conn.waiters.append(waiter)
            await waiter
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        conn = self.conn
        kind = message["type"]
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("response already started")
            self.started = True
            self.status = message["status"]
            self.response_headers = message.get("headers", [])
            return
        if kind != "http.response.body" or not self.started or self.done:
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        if conn.closed:
            return
        body: bytes = message.get("body", b"")
        more = message.get("more_body", False)
        out: bytes
        if not self.sent_head:
            self.sent_head = True
            head = self._response_head(body, more)
            if self.chunked:
                out = head + (b"%x\r\n%b\r\n" % (len(body), body) if body else b"")
            else:
                out = head if self.head else head + body
        elif self.chunked:
            out = b"%x\r\n%b\r\n" % (len(body), body) if body else b""
        else:
            out = body
        if not more:
            if self.chunked:
                out += b"0\r\n\r\n"
            self.done = True
        if out and not (self.head and self.chunked):
            conn.transport.write(out)
        if not more:
            conn.finished(self)
        elif conn.paused:
            await conn.drain()

    def _response_head(self, body: bytes, more: bool) -> bytes:
        status = self.status
        lines = [b"HTTP/1.1 %d %b\r\n" % (status, _REASONS.get(status, b"Unknown")), _SERVER]
        length = False
        for name, value in self.response_headers:
            low = name.lower()
            if low == b"content-length":
                length = True
            elif low == b"connection" and value.lower() == b"close":
                self.keep_alive = False
            lines.append(b"%b: %b\r\n" % (name, value))
        if not length:
            if more:
                self.chunked = True
                lines.append(b"transfer-encoding: chunked\r\n")
            else:
                lines.append(b"content-length: %d\r\n" % len(body))
        if not self.keep_alive:
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        return b"".join(lines)


class HttpProtocol(asyncio.Protocol):
    def __init__(self, server: LeanServer) -> None:
        self.server = server
        self.loop = server.loop
        self.app = server.app
        self.buffer = bytearray()
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.current: _Exchange | None = None
        self.closed = False
        self.paused = False
        self.reading = True
        self.drained: list[asyncio.Future[None]] = []
        self.waiters: list[asyncio.Future[None]] = []
        self.client: tuple[str, int] | None = None
        self.local: tuple[str, int] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self.client = (peer[0], peer[1]) if isinstance(peer, tuple) else None
        self.local = (local[0], local[1]) if isinstance(local, tuple) else None
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        self._wake(self.waiters)
        self._wake(self.drained)

    @staticmethod
    def _wake(futures: list[asyncio.Future[None]]) -> None:
        for f in futures:
            if not f.done():
                f.set_result(None)
        futures.clear()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self._wake(self.drained)

    async def drain(self) -> None:
        if self.paused and not self.closed:
            waiter = self.loop.create_future()
            self.drained.append(waiter)
            await waiter

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.current is None:
            self._next()
        elif len(self.buffer) > MAX_HEAD and self.reading:
            # Pipelined bytes pile up behind a running request: stop reading until it is done.
            self.reading = False
            self.transport.pause_reading()

    def eof_received(self) -> bool | None:
        # A half-closed client: the response still goes out, then the connection closes.
        if self.current is None:
            self.transport.close()
        else:
            self.current.keep_alive = False
        return True

    def _next(self) -> None:
        """Start the next complete request in the buffer, if any."""
        buf = self.buffer
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                self._reject(431)
            return
        try:
            method, target, version, headers = _parse_head(bytes(buf[:end]))
        except _BadRequest:
            self._reject(400)
            return
        length = 0
        chunked = False
        keep_alive = version == "1.1"
        for name, value in headers:
            if name == b"content-length":
                if not value.isdigit():
                    self._reject(400)
                    return
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                lowered = value.lower()
                if b"close" in lowered:
                    keep_alive = False
                elif b"keep-alive" in lowered:
                    keep_alive = True
        start = end + 4
        if chunked:
            parsed = _dechunk(buf, start)
            if parsed is None:
                return
            body, used = parsed
        else:
            if len(buf) - start < length:
                return
            body, used = bytes(buf[start : start + length]), start + length
        del buf[:used]
        path, _, query = target.partition(b"?")
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": version,
            "method": method,
            "scheme": "http",
            "path": unquote(path.decode("latin-1")),
            "raw_path": path,
            "query_string": query,
            "root_path": "",
            "headers": headers,
            "client": self.client,
            "server": self.local,
        }
        exchange = _Exchange(self, scope, keep_alive)
        exchange.body = body
        self.current = exchange
        task = self.loop.create_task(self._run(exchange))
        self.server.tasks.add(task)
        task.add_done_callback(self.server.tasks.discard)

    def _reject(self, status: int) -> None:
        reason = _REASONS.get(status, b"Bad Request")
        self.transport.write(
            b"HTTP/1.1 %d %b\r\ncontent-length: 0\r\nconnection: close\r\n\r\n" % (status, reason)
        )
        self.transport.close()
        self.closed = True

    async def _run(self, exchange: _Exchange) -> None:
        try:
            await self.app(exchange.scope, exchange.receive, exchange.send)
        except asyncio.CancelledError:
            self.transport.close()
            raise
        except Exception:
            log.exception("Exception inside application")
            if not exchange.started and not self.closed:
                exchange.started = True
                exchange.status = 500
                exchange.response_headers = [(b"content-type", b"text/plain")]
                exchange.keep_alive = False
                await exchange.send(
                    {"type": "http.response.body", "body": b"Internal Server Error"}
                )
                return
        if not exchange.done and not self.closed:
            # The app returned without finishing its response: nothing valid can follow.
            self.transport.close()

    def finished(self, exchange: _Exchange) -> None:
        """The response's last bytes are written: the next request may start."""
        self.current = None
        self._wake(self.waiters)  # its receive() now answers http.disconnect
        if not exchange.keep_alive or self.server.stopping:
            self.transport.close()
            return
        if not self.reading:
            self.reading = True
            self.transport.resume_reading()
        if self.buffer:
            self._next()


def _dechunk(buf: bytearray, start: int) -> tuple[bytes, int] | None:
    """A chunked request body from `start`: (body, end offset), or None until it is complete."""
    parts: list[bytes] = []
    pos = start
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";")[0], 16)
        pos = eol + 2
        if size == 0:
            end = buf.find(b"\r\n\r\n", pos - 2)
            return (b"".join(parts), end + 4) if end >= 0 else None
        if len(buf) < pos + size + 2:
            return None
        parts.append(bytes(buf[pos : pos + size]))
        pos += size + 2


class LeanServer:
    """Serves `app` on a listening socket until SIGTERM or SIGINT."""

    def __init__(self, app: App, loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.loop = loop
        self.connections: set[HttpProtocol] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False

    async def serve(
        self,
        sock: socket.socket,
        *,
        started: Callable[[], None],
        before_shutdown: Callable[[], None],
        close_timeout: float = 2.0,
    ) -> None:
        stop = asyncio.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(signum, stop.set)
        server = await self.loop.create_server(lambda: HttpProtocol(self), sock=sock)
        started()
        try:
            await stop.wait()
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                self.loop.remove_signal_handler(signum)
        self.stopping = True
        server.close()
        before_shutdown()
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=close_timeout)
        for task in set(self.tasks):
            task.cancel()
        for conn in list(self.connections):
            conn.transport.close()
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=close_timeout)
