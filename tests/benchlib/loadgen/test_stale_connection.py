from __future__ import annotations

# A server that closes a kept-alive connection as the next request arrives on it: the race
# llama-server's HTTP server runs with a client that reuses connections. The client must send
# such a request again (and say so), and must not retry anything else.
import asyncio
import contextlib
import json
import select
import socket
import threading

from benchlib.loadgen.apis import Api
from benchlib.loadgen.client import make_client, send_request
from benchlib.loadgen.http1 import Connection
from benchlib.loadgen.records import ClockAnchor, RequestRecord

_EVENTS = [
    {"choices": [{"text": "a", "finish_reason": None}], "usage": {"completion_tokens": 1}},
    {"choices": [{"text": "b", "finish_reason": "length"}], "usage": {"completion_tokens": 2}},
]
_BODY = (
    b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in _EVENTS) + b"data: [DONE]\n\n"
)
_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\n"
    b"Content-Length: " + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY
)


class ClosingServer:
    """Answers the first `serve` requests of each connection, then closes it unanswered."""

    def __init__(self, serve: int) -> None:
        self.serve = serve
        self.connections = 0
        self.requests = 0  # requests read in full (answered or not)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                self.requests += 1
                if served >= self.serve:
                    return  # close without a byte of response
                writer.write(_RESPONSE)
                await writer.drain()
                served += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


async def _send(client, url, rid):
    rec = RequestRecord(request_id=rid)
    await send_request(client, api=Api.COMPLETIONS, url=url, content=b'{"prompt": "x"}', rec=rec)
    return rec


async def _serve(serve):
    fake = ClosingServer(serve)
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return fake, server, f"http://127.0.0.1:{port}/v1/completions"


async def test_a_reused_connection_closed_before_a_response_is_retried_once_and_recorded():
    fake, server, url = await _serve(serve=1)
    async with server, make_client(1) as client:
        first = await _send(client, url, "r1")
        second = await _send(client, url, "r2")  # goes out on r1's kept-alive connection
    assert first.ok and first.retries == 0
    assert second.ok, second.error
    assert second.retries == 1
    assert second.output_tokens == 2 and second.finish_reason == "length"
    assert fake.connections == 2 and fake.requests == 3
    anchor = ClockAnchor.now()
    assert second.to_json(anchor, level_index=0)["retries"] == 1
    assert "retries" not in first.to_json(anchor, level_index=0)
    assert RequestRecord.from_json(second.to_json(anchor, level_index=0), anchor).retries == 1


async def test_a_fresh_connection_closed_before_a_response_is_an_error_not_a_retry():
    fake, server, url = await _serve(serve=0)
    async with server, make_client(1) as client:
        rec = await _send(client, url, "r1")
    assert rec.error_kind == "disconnect"
    assert "without sending a response" in (rec.error or "")
    assert rec.retries == 0
    assert fake.requests == 1  # sent once: the server may have seen it, so no second copy


async def test_a_retry_goes_out_on_a_new_connection_never_on_another_kept_alive_one():
    # Every connection answers once and two are kept alive: request c goes out on a stale one.
    # Its retry must open a new connection: the other pooled one is just as stale (llama-server
    # closes every connection after its response), and sending there lost the request (the
    # one `disconnect` in 520 requests against the real server).
    fake, server, url = await _serve(serve=1)
    async with server, make_client(2) as client:
        await asyncio.gather(_send(client, url, "a"), _send(client, url, "b"))  # two connections
        rec = await _send(client, url, "c")
    assert fake.connections == 3  # a's, b's, and the one c's retry opened
    assert rec.ok, rec.error
    assert rec.retries == 1


async def test_a_retry_whose_new_connection_closes_too_is_recorded_as_the_failure():
    # Kept alive once, then closed unanswered; the retry's new connection is closed unanswered
    # too: no longer a race of reuse but a server refusing requests, so no third attempt.
    fake, server, url = await _serve(serve=1)
    async with server, make_client(1) as client:
        assert (await _send(client, url, "a")).ok
        fake.serve = 0
        rec = await _send(client, url, "b")
    assert rec.retries == 1
    assert not rec.ok and rec.error_kind == "disconnect"
    assert fake.connections == 2 and fake.requests == 3


class AnswerThenCloseServer:
    """llama-server's way (cpp-httplib 0.49+, llama.cpp 0c1e570): each streamed response
    announces keep-alive, and the server closes the connection right after it. A thread of its
    own, so the test can wait for the close without the client's event loop running."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.requests = 0
        self.closed = threading.Semaphore(0)  # released once per connection closed
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # listener closed: the test is over
            self.connections += 1
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                if b"\r\n\r\n" in data:
                    self.requests += 1
                    conn.sendall(
                        _RESPONSE.replace(
                            b"keep-alive", b"keep-alive\r\nKeep-Alive: timeout=5, max=100"
                        )
                    )
            self.closed.release()

    def close(self) -> None:
        self.listener.close()


def _wait_readable(conn: Connection) -> None:
    # the server's close has reached the client's socket (the event loop has not looked yet)
    sock = conn.transport.get_extra_info("socket") if conn.transport else None
    assert sock is not None
    readable, _, _ = select.select([sock.fileno()], [], [], 10.0)
    assert readable, "the server's close never reached the client"


async def test_an_idle_connection_the_server_closed_is_not_reused_even_before_the_loop_sees_it():
    fake = AnswerThenCloseServer()
    try:
        async with make_client(1) as client:
            target = client.target(f"http://127.0.0.1:{fake.port}/v1/completions", {})
            conn = await client.connect(target)
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            conn.send(target.head + b"Content-Length: 0\r\n\r\n", lambda body, now: None, done)
            await done
            assert conn.status == 200 and conn.reusable  # it announced keep-alive
            client.give_back(target, conn)
            # Blocking waits on purpose: the loop must not run, so that only the socket knows.
            assert fake.closed.acquire(timeout=10)
            _wait_readable(conn)
            assert conn.reusable  # what the loop knows: still open
            assert client.take(target) is None  # what the socket says: closed
            assert conn.closed
    finally:
        fake.close()


async def test_requests_to_a_server_that_closes_after_each_response_need_no_retry():
    fake = AnswerThenCloseServer()
    url = f"http://127.0.0.1:{fake.port}/v1/completions"
    try:
        async with make_client(1) as client:
            recs = []
            for i in range(3):
                recs.append(await _send(client, url, f"r{i}"))
                assert fake.closed.acquire(timeout=10)
                conn = client._idle[client.target(url, {}).origin][-1]
                _wait_readable(conn)
        assert all(r.ok for r in recs), [r.error for r in recs]
        assert [r.retries for r in recs] == [0, 0, 0]  # none was written on a closed connection
        assert fake.connections == 3 and fake.requests == 3
    finally:
        fake.close()
