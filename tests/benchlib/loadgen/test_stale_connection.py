from __future__ import annotations

# A server that closes a kept-alive connection as the next request arrives on it: the race
# llama-server's HTTP server runs with a client that reuses connections. The client must send
# such a request again (and say so), and must not retry anything else.
import asyncio
import contextlib
import json

from benchlib.loadgen.apis import Api
from benchlib.loadgen.client import make_client, send_request
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


async def test_a_second_stale_connection_in_a_row_is_recorded_as_the_failure():
    # Every connection answers once and two are kept alive: request c goes out on a stale one,
    # and its one retry on the other stale one; that is recorded, not retried again.
    fake, server, url = await _serve(serve=1)
    async with server, make_client(2) as client:
        await asyncio.gather(_send(client, url, "a"), _send(client, url, "b"))  # two connections
        rec = await _send(client, url, "c")
    assert fake.connections >= 2
    assert rec.retries == 1
    assert not rec.ok and rec.error_kind == "disconnect"
