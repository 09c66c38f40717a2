from __future__ import annotations

# A lean HTTP/1.1 client for the load generator's hot path, on asyncio's transport/protocol layer.
#
# Why not httpx here: a request on a warm httpx connection crossed 4 event-loop turns between the
# call and the request being written (httpcore's pool and connection locks, anyio's header and
# body writes), and each response chunk cost ~25-45 us in httpx, httpcore, h11 and anyio. On a
# loop that reads tens of thousands of chunks a second each turn waits behind them: that was the
# TTFT the client added (docs/measurement.md, "Capacity"). Here the request is written with one
# `transport.write` in the same turn it is sent, and the response is parsed in `data_received`:
# the body goes to the caller's sink synchronously, stamped with one `perf_counter()` per read,
# with no task wake-up per chunk.
#
# What it speaks: one request at a time per connection (no pipelining), a status line, headers,
# bodies framed by `Transfer-Encoding: chunked`, `Content-Length` or the connection's close,
# 1xx interim responses skipped, keep-alive unless the server says `Connection: close`, TLS
# through an `ssl.SSLContext`. Not: redirects, proxies, compression (the request asks for
# `identity`), HTTP/2, streamed request bodies. httpx remains the client everywhere else.
import asyncio
import select
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

BodySink = Callable[[bytes, float], None]

_HEAD, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILERS, _LENGTH, _UNTIL_CLOSE, _IDLE = range(8)
_MAX_HEAD = 64 * 1024  # a response head (or chunk-size line) longer than this is not HTTP we speak
_MAX_ERROR_BODY = 64 * 1024  # the body of a non-200 answer is kept up to this, for its message


class ServerDisconnected(ConnectionError):
    """The server closed the connection before the response was complete."""


class ProtocolViolation(Exception):
    """The response is not HTTP/1.1 this client can read."""


@dataclass(frozen=True, slots=True)
class Target:
    """One URL, parsed once: where to connect and the fixed part of the request head."""

    host: str
    port: int
    tls: bool
    head: bytes  # request line and fixed headers, each ending in CRLF

    @property
    def origin(self) -> tuple[str, int, bool]:
        return self.host, self.port, self.tls


def parse_target(url: str, headers: dict[str, str]) -> Target:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    host = parts.hostname
    authority = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        authority += f":{parts.port}"
    lines = [f"POST {path} HTTP/1.1", f"Host: {authority}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return Target(host, port, tls, ("\r\n".join(lines) + "\r\n").encode("latin-1"))


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; `send` starts an exchange whose outcome is the future it gets."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._readable: select.poll | None = None  # the socket, polled before reuse
        self.closed = False
        self.served = 0  # exchanges completed on this connection
        self.status = 0
        self.keep_alive = False
        self.got_bytes = False  # a byte of the current exchange's response arrived
        self.error_body = bytearray()
        self._sink: BodySink | None = None
        self._done: asyncio.Future[None] | None = None
        self._state = _IDLE
        self._buf = b""
        self._remaining = 0

    @property
    def reusable(self) -> bool:
        return (
            self._state == _IDLE
            and self.keep_alive
            and not self.closed
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._readable = select.poll()  # poll, not select: fds past 1024 at high concurrency
            self._readable.register(sock.fileno(), select.POLLIN)

    def peer_spoke_while_idle(self) -> bool:
        """Whether the socket of this idle connection has something to read: the server's close
        (or stray bytes), which the event loop may not have handled yet.

        llama-server ends every streamed response by closing the connection although the response
        announced keep-alive (its chunked provider returns false after the last chunk, which
        cpp-httplib treats as a cancelled write and closes). The close arrives right behind the
        last chunk, often before the loop has read it, so `reusable` still says yes: a request
        written then meets the close and must be sent again. httpcore and urllib3 make the same
        check before reusing a connection (one poll(2), no wait). Under TLS the readable bytes
        may be a record the loop has not read yet rather than a close: the connection is dropped
        all the same, which costs a new connection, never a lost request."""
        return self._readable is not None and bool(self._readable.poll(0))

    def send(self, data: bytes, sink: BodySink, done: asyncio.Future[None]) -> None:
        """Write one whole request now; the response body of a 200 goes to `sink` as it
        arrives and `done` resolves when the response is complete (or fails)."""
        assert self.transport is not None and self._state == _IDLE
        self._sink = sink
        self._done = done
        self._state = _HEAD
        self._buf = b""
        self.status = 0
        self.keep_alive = False
        self.got_bytes = False
        self.error_body.clear()
        self.transport.write(data)

    def abort(self) -> None:
        self.closed = True
        self._state = _IDLE
        self.keep_alive = False
        if self.transport is not None:
            self.transport.abort()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._state == _UNTIL_CLOSE:
            self._complete()
        elif self._state != _IDLE:
            self._state = _IDLE
            if self.got_bytes:
                why = "Server disconnected before the response was complete"
            else:
                why = "Server disconnected without sending a response"
            self._fail(ServerDisconnected(f"{why}: {exc}" if exc else why))

    def _fail(self, exc: BaseException) -> None:
        self._state = _IDLE
        self.keep_alive = False
        done = self._done
        if done is not None and not done.done():
            done.set_exception(exc)
        if self.transport is not None:
            self.transport.abort()

    def _complete(self) -> None:
        self._state = _IDLE
        self.served += 1
        done = self._done
        if done is not None and not done.done():
            done.set_result(None)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if self._state == _IDLE:
            # bytes nobody asked for: the connection can no longer be trusted
            self.keep_alive = False
            self.close()
            return
        self.got_bytes = True
        if self._buf:
            data = self._buf + data
            self._buf = b""
        try:
            body, complete = self._parse(data)
            if body:
                if self.status == 200:
                    assert self._sink is not None
                    self._sink(body, now)
                elif len(self.error_body) < _MAX_ERROR_BODY:
                    self.error_body += body
        except Exception as exc:  # a malformed response, or the sink failed on the body
            self._fail(exc)
            return
        if complete:
            self._complete()

    def _parse(self, data: bytes) -> tuple[bytes, bool]:
        """Advance the parser over `data`: (body bytes found, response complete)."""
        out: list[bytes] = []
        pos = 0
        end = len(data)
        state = self._state
        complete = False
        while pos < end:
            if state == _CHUNK_DATA:
                stop = pos + self._remaining
                if stop <= end:
                    out.append(data[pos:stop])
                    pos = stop
                    state = _CHUNK_CRLF
                else:
                    out.append(data[pos:])
                    self._remaining = stop - end
                    pos = end
            elif state == _CHUNK_CRLF:
                if end - pos < 2:
                    self._buf = data[pos:]
                    break
                if data[pos : pos + 2] != b"\r\n":
                    raise ProtocolViolation("chunk data not followed by CRLF")
                pos += 2
                state = _CHUNK_SIZE
            elif state == _CHUNK_SIZE:
                i = self._find_or_keep(data, pos, b"\r\n")
                if i < 0:
                    break
                try:
                    size = int(data[pos:i].split(b";", 1)[0], 16)
                except ValueError:
                    raise ProtocolViolation(f"bad chunk size line {data[pos:i][:40]!r}") from None
                pos = i + 2
                if size:
                    self._remaining = size
                    state = _CHUNK_DATA
                else:
                    state = _TRAILERS
            elif state == _TRAILERS:
                i = self._find_or_keep(data, pos, b"\r\n")
                if i < 0:
                    break
                if i == pos:
                    pos += 2
                    complete = True
                    break
                pos = i + 2  # a trailer field: nothing we use
            elif state == _LENGTH:
                take = min(self._remaining, end - pos)
                out.append(data[pos : pos + take])
                pos += take
                self._remaining -= take
                if not self._remaining:
                    complete = True
                    break
            elif state == _UNTIL_CLOSE:
                out.append(data[pos:])
                pos = end
            else:  # _HEAD
                i = self._find_or_keep(data, pos, b"\r\n\r\n")
                if i < 0:
                    break
                state = self._head(data[pos:i])
                pos = i + 4
                if state == _IDLE:
                    complete = True
                    break
        self._state = state
        if complete and pos < end:
            self.keep_alive = False  # bytes past the end of the response: do not reuse
        return (out[0] if len(out) == 1 else b"".join(out)), complete

    def _find_or_keep(self, data: bytes, pos: int, terminator: bytes) -> int:
        """Where `terminator` (a head's or a chunk line's end) starts in `data` from `pos`; -1
        when it has not arrived yet, the unfinished part then kept for the next read (bounded:
        a server that never ends a line cannot grow it without limit)."""
        i = data.find(terminator, pos)
        if i < 0:
            if len(data) - pos > _MAX_HEAD:
                raise ProtocolViolation("response head or chunk line too long")
            self._buf = data[pos:]
        return i

    def _head(self, head: bytes) -> int:
        """Read a status line and headers; returns the body state (_IDLE: no body)."""
        lines = head.split(b"\r\n")
        version, _, rest = lines[0].partition(b" ")
        if not version.startswith(b"HTTP/1.") or not rest[:3].isdigit():
            raise ProtocolViolation(f"bad status line {lines[0][:80]!r}")
        status = int(rest[:3])
        if 100 <= status < 200:
            return _HEAD  # interim response (100 Continue): the real one follows
        chunked = False
        length: int | None = None
        connection = b""
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                raise ProtocolViolation(f"bad header line {line[:80]!r}")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    raise ProtocolViolation(f"bad Content-Length {value[:40]!r}") from None
            elif name == b"connection":
                connection = value.strip().lower()
        self.status = status
        if version == b"HTTP/1.1":
            self.keep_alive = b"close" not in connection
        else:
            self.keep_alive = b"keep-alive" in connection
        if chunked:
            return _CHUNK_SIZE
        if length is not None:
            self._remaining = length
            return _LENGTH if length else _IDLE
        if status in (204, 304):
            return _IDLE
        self.keep_alive = False
        return _UNTIL_CLOSE


class Http1Client:
    """Keep-alive connections for `concurrency` concurrent streams (one request per connection
    at a time). A request that finds no idle connection opens one: the level never runs more
    requests than its concurrency, so there is no queue to wait in."""

    def __init__(
        self,
        concurrency: int,
        *,
        request_timeout: float = 600.0,
        connect_timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.size = concurrency + 4
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self._ssl = ssl_context
        self._idle: dict[tuple[str, int, bool], list[Connection]] = {}
        self._open: set[Connection] = set()
        self._targets: dict[str, Target] = {}

    def target(self, url: str, headers: dict[str, str]) -> Target:
        """The parsed URL with `headers` in its fixed head, parsed once per URL."""
        cached = self._targets.get(url)
        if cached is None:
            cached = self._targets[url] = parse_target(url, headers)
        return cached

    def take(self, target: Target) -> Connection | None:
        """The most recently used idle connection to `target` that is still open."""
        idle = self._idle.get(target.origin)
        while idle:
            conn = idle.pop()
            if conn.reusable and not conn.peer_spoke_while_idle():
                return conn
            self._forget(conn)
        return None

    async def connect(self, target: Target) -> Connection:
        loop = asyncio.get_running_loop()
        context: ssl.SSLContext | None = None
        if target.tls:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            context = self._ssl
        async with asyncio.timeout(self.connect_timeout):
            _, conn = await loop.create_connection(
                Connection,
                target.host,
                target.port,
                ssl=context,
                server_hostname=target.host if context is not None else None,
            )
        self._open.add(conn)
        return conn

    def give_back(self, target: Target, conn: Connection) -> None:
        idle = self._idle.setdefault(target.origin, [])
        if conn.reusable and len(idle) < self.size:
            idle.append(conn)
        else:
            conn.close()
            self._forget(conn)

    def discard(self, conn: Connection) -> None:
        conn.abort()
        self._forget(conn)

    def _forget(self, conn: Connection) -> None:
        self._open.discard(conn)
        if not conn.closed:
            conn.close()

    async def aclose(self) -> None:
        for conn in self._open:
            conn.close()
        self._open.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports run their close callbacks

    async def __aenter__(self) -> Http1Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
