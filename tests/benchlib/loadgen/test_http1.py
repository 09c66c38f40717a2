from __future__ import annotations

# The hot-path HTTP/1.1 client (http1.py) through `send_request`, against scripted raw servers:
# each server reads one request and then does exactly what a test says (bytes, pauses, a close).
import asyncio
import contextlib
import json
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from benchlib.loadgen.apis import Api
from benchlib.loadgen.client import make_client, send_request
from benchlib.loadgen.health import LiveStats
from benchlib.loadgen.http1 import Connection, Http1Client
from benchlib.loadgen.records import RequestRecord
from tests.fixtures.polls import eventually


def event(text: str, total: int, finish: str | None = None) -> bytes:
    obj = {
        "choices": [{"index": 0, "text": text, "finish_reason": finish}],
        "usage": {"prompt_tokens": 4, "completion_tokens": total},
    }
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


SSE = event("a", 1) + event("bcd", 4) + event("e", 5, "length") + b"data: [DONE]\n\n"


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


OK_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)
CHUNKED_OK = OK_HEAD + chunked(*(p + b"\n\n" for p in SSE.split(b"\n\n")[:-1]))

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head + await reader.readexactly(length)


class Server:
    """Runs `script` for every request on every connection; counts both."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while not writer.is_closing():
                self.requests.append(await read_request(reader))
                await self.script(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


@contextlib.asynccontextmanager
async def serving(script: Script, ssl_context: ssl.SSLContext | None = None):
    fake = Server(script)
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0, ssl=ssl_context)
    port = server.sockets[0].getsockname()[1]
    scheme = "https" if ssl_context else "http"
    async with server:
        yield fake, f"{scheme}://127.0.0.1:{port}/v1/completions"


def reply(*pieces: bytes, pause: float = 0.0, close: bool = False) -> Script:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            if pause:
                await asyncio.sleep(pause)
        if close:
            writer.close()

    return script


async def send(
    client: Http1Client, url: str, rid: str = "r", total_timeout: float = 600.0
) -> RequestRecord:
    rec = RequestRecord(request_id=rid)
    await send_request(
        client,
        api=Api.COMPLETIONS,
        url=url,
        content=b'{"p":1}',
        rec=rec,
        total_timeout=total_timeout,
    )
    return rec


def assert_full_stream(rec: RequestRecord) -> None:
    assert rec.ok, rec.error
    assert rec.chunk_tokens == [1, 3, 1]
    assert rec.output_tokens == 5 and rec.prompt_tokens == 4
    assert rec.finish_reason == "length"
    assert rec.start <= rec.sent <= rec.written <= rec.first_token <= rec.end  # type: ignore[operator]


# -- the parser, fed by hand -------------------------------------------------------------


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.aborted = False

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.written += data

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True


def feed_in_pieces(response: bytes, cuts: list[int]) -> tuple[Connection, bytes, bool]:
    loop = asyncio.new_event_loop()
    try:
        conn = Connection()
        transport = FakeTransport()
        conn.connection_made(transport)
        body = bytearray()
        done: asyncio.Future[None] = loop.create_future()
        conn.send(b"GET / HTTP/1.1\r\n\r\n", lambda data, now: body.extend(data), done)
        prev = 0
        for cut in [*cuts, len(response)]:
            if response[prev:cut]:
                conn.data_received(response[prev:cut])
            prev = cut
        ok = done.done() and done.exception() is None
        return conn, bytes(body), ok
    finally:
        loop.close()


def test_a_chunked_body_split_at_every_byte_boundary_reads_the_same():
    for cut in range(1, len(CHUNKED_OK)):
        conn, body, ok = feed_in_pieces(CHUNKED_OK, [cut])
        assert ok and body == SSE, cut
        assert conn.reusable, cut


def test_a_chunked_body_fed_byte_by_byte_reads_the_same():
    conn, body, ok = feed_in_pieces(CHUNKED_OK, list(range(1, len(CHUNKED_OK))))
    assert ok and body == SSE and conn.status == 200


def test_chunk_extensions_trailers_and_interim_responses_are_skipped():
    response = (
        b"HTTP/1.1 100 Continue\r\n\r\n"
        + OK_HEAD
        + b"4;ext=1\r\nabcd\r\n2\r\nef\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    for cut in range(1, len(response)):
        _conn, body, ok = feed_in_pieces(response, [cut])
        assert ok and body == b"abcdef", cut


def test_a_malformed_chunk_size_fails_the_exchange_and_drops_the_connection():
    conn, _body, ok = feed_in_pieces(OK_HEAD + b"zz\r\nabc\r\n", [])
    assert not ok and not conn.reusable


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * (64 * 1024),  # a head that never ends
        OK_HEAD + b"4;" + b"x" * (64 * 1024),  # a chunk-size line that never ends
        OK_HEAD + b"0\r\nX-Trailer: " + b"t" * (64 * 1024),  # a trailer line that never ends
    ],
    ids=["head", "chunk-size", "trailer"],
)
def test_a_line_that_never_ends_fails_the_exchange_instead_of_growing(response):
    # Fed in 1 KiB pieces: the unfinished line is kept between reads until it passes the bound.
    conn, _body, ok = feed_in_pieces(response, list(range(1024, len(response), 1024)))
    assert not ok and not conn.reusable
    assert isinstance(conn.transport, FakeTransport) and conn.transport.aborted
    # Below the bound it is only waiting for the rest: nothing failed, the connection is open.
    waiting, _body, _ok = feed_in_pieces(response[:4096], list(range(1024, 4096, 1024)))
    assert isinstance(waiting.transport, FakeTransport) and not waiting.transport.aborted


# -- through send_request ----------------------------------------------------------------


async def test_a_chunked_stream_written_in_small_pieces_is_recorded_in_full():
    pieces = [CHUNKED_OK[i : i + 7] for i in range(0, len(CHUNKED_OK), 7)]
    async with serving(reply(*pieces, pause=0.001)) as (_, url), make_client(1) as client:
        live = LiveStats()
        rec = RequestRecord(request_id="r")
        await send_request(client, api=Api.COMPLETIONS, url=url, content=b"{}", rec=rec, live=live)
    assert_full_stream(rec)
    assert live.tokens == 5


async def test_content_length_and_close_delimited_bodies_are_read_whole():
    by_length = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)
    by_close = b"HTTP/1.0 200 OK\r\n\r\n" + SSE
    async with serving(reply(by_length)) as (fake, url), make_client(1) as client:
        first, second = await send(client, url, "a"), await send(client, url, "b")
    assert_full_stream(first)
    assert_full_stream(second)
    assert fake.connections == 1  # kept alive: the second request reused the connection
    async with serving(reply(by_close, close=True)) as (_, url), make_client(1) as client:
        rec = await send(client, url)
    assert_full_stream(rec)


async def test_the_request_is_written_before_the_first_loop_turn_on_a_warm_connection():
    async with serving(reply(CHUNKED_OK)) as (fake, url), make_client(1) as client:
        await send(client, url, "warm")
        rec = RequestRecord(request_id="next")
        task = asyncio.create_task(
            send_request(client, api=Api.COMPLETIONS, url=url, content=b"{}", rec=rec)
        )
        await asyncio.sleep(0)  # the task's first step only
        assert rec.written is not None and rec.first_token is None
        await task
    assert_full_stream(rec)
    assert fake.connections == 1
    head = fake.requests[1]
    assert head.startswith(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"\r\nX-Request-Id: next\r\n" in head and b"\r\nContent-Length: 2\r\n" in head


async def test_a_server_closing_mid_stream_is_a_disconnect_with_the_tokens_read_so_far():
    cut = OK_HEAD + chunked(event("a", 1), event("bcd", 4))[:-5]  # no last chunk
    async with serving(reply(cut, pause=0.01, close=True)) as (_, url), make_client(1) as client:
        rec = await send(client, url)
    assert rec.error_kind == "disconnect"
    assert "before the response was complete" in (rec.error or "")
    assert rec.chunk_tokens == [1, 3] and rec.output_tokens == 4
    assert rec.retries == 0


ERROR_400 = b'{"error": {"message": "max_tokens too large"}}'


@pytest.mark.parametrize(
    ("response", "kind", "message"),
    [
        (
            b"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(ERROR_400), ERROR_400),
            "http_400",
            "max_tokens too large",
        ),
        (
            b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunked(b'{"detail": ', b'"loading model"}'),
            "http_503",
            "loading model",
        ),
    ],
)
async def test_an_error_status_body_is_read_into_the_error(response, kind, message):
    async with serving(reply(response)) as (fake, url), make_client(1) as client:
        first = await send(client, url, "a")
        second = await send(client, url, "b")
    for rec in (first, second):
        assert rec.error_kind == kind
        assert rec.error == message
        assert rec.chunk_times == []
    assert fake.connections == 1  # a complete error response leaves the connection usable


async def test_an_idle_connection_the_server_closed_is_not_reused():
    # The server answers, then closes its side while the client is idle: the next request
    # sees the close, opens a new connection and needs no retry.
    async with serving(reply(CHUNKED_OK, close=True)) as (fake, url), make_client(1) as client:
        first = await send(client, url, "a")
        # Until the close has reached the client's idle connection (polled, not guessed).
        origin = client.target(url, {}).origin
        await eventually(
            lambda: not any(c.reusable for c in client._idle.get(origin, [])),
            timeout=10, what="the server's close reaching the idle connection",
        )  # fmt: skip
        second = await send(client, url, "b")
    assert_full_stream(first)
    assert_full_stream(second)
    assert second.retries == 0
    assert fake.connections == 2


async def test_a_slow_server_hits_the_timeout_and_keeps_what_it_read():
    slow = reply(OK_HEAD + chunked(event("a", 1))[:-5], pause=5.0)
    async with serving(slow) as (_, url), make_client(1) as client:
        rec = await send(client, url, total_timeout=0.3)
        assert rec.error_kind == "timeout"
        assert rec.chunk_tokens == [1]
        assert 0.3 <= rec.end - rec.start < 2.0
        assert client.take(client.target(url, {})) is None  # the cut connection is not reused


async def test_cancelling_a_request_records_it_and_propagates():
    slow = reply(OK_HEAD + chunked(event("a", 1))[:-5], pause=5.0)
    async with serving(slow) as (_, url), make_client(1) as client:
        rec = RequestRecord(request_id="c")
        task = asyncio.create_task(
            send_request(client, api=Api.COMPLETIONS, url=url, content=b"{}", rec=rec)
        )
        while rec.first_token is None:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert rec.error_kind == "cancelled"
    assert rec.chunk_tokens == [1]


async def test_a_malformed_status_line_is_a_protocol_error():
    async with serving(reply(b"HTTP/2 OK\r\n\r\n")) as (_, url), make_client(1) as client:
        rec = await send(client, url)
    assert rec.error_kind == "protocol"
    assert "status line" in (rec.error or "")


async def test_nothing_listening_is_a_connect_error():
    async with make_client(1) as client:
        rec = await send(client, "http://127.0.0.1:9/v1/completions")
    assert rec.error_kind == "connect"


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_a_stream_over_tls_is_read_and_an_untrusted_certificate_is_a_connect_error(
    tls_files,
):
    cert, key = tls_files
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    trusting = ssl.create_default_context(cafile=str(cert))
    async with serving(reply(CHUNKED_OK), server_ctx) as (fake, url):
        async with make_client(1, ssl_context=trusting) as client:
            first, second = await send(client, url, "a"), await send(client, url, "b")
        async with make_client(1) as client:  # the system's CAs do not know this certificate
            untrusted = await send(client, url, "c")
    assert_full_stream(first)
    assert_full_stream(second)
    assert fake.connections == 1  # one kept-alive connection; a failed handshake gets no handler
    assert untrusted.error_kind == "connect"
    assert "CERTIFICATE_VERIFY_FAILED" in (untrusted.error or "")
