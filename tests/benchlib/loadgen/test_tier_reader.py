"""The fast tier reading's own HTTP/1.1 reader (benchlib.loadgen.controller.FamilyReader) and
when the tracker stops it: answers by Content-Length and by chunks on one kept-alive
connection, a failed answer counted and the connection reopened, and no fast reading where the
server exports no tier (vLLM, or a server without speculation)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from benchlib.loadgen.controller import ControllerTracker, FamilyReader

TIER_LINE = 'sglang:spec_num_steps{model_name="m",tp_rank="0"} 1.0\n'


def _plain(body: str, status: str = "200 OK") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n{body}"
    ).encode()


def _chunked(body: str) -> bytes:
    half = len(body) // 2
    chunks = "".join(f"{len(part):x}\r\n{part}\r\n" for part in (body[:half], body[half:]))
    return f"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{chunks}0\r\n\r\n".encode()


class FakeMetrics:
    """Answers each request with the next of ``answers`` and records the request lines and
    how many connections were opened."""

    def __init__(self, answers: list[Callable[[], bytes]]) -> None:
        self.answers = answers
        self.requests: list[str] = []
        self.connections = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.requests.append(head.decode().split("\r\n", 1)[0])
                answer = self.answers.pop(0)() if self.answers else _plain(TIER_LINE)
                writer.write(answer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def fake() -> AsyncIterator[tuple[FakeMetrics, str]]:
    metrics = FakeMetrics([])
    server = await asyncio.start_server(metrics.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield metrics, f"http://127.0.0.1:{port}/metrics"


async def test_answers_by_length_and_by_chunks_come_over_one_connection(
    fake: tuple[FakeMetrics, str],
) -> None:
    metrics, url = fake
    metrics.answers = [lambda: _plain(TIER_LINE), lambda: _chunked(TIER_LINE * 3)]
    reader = FamilyReader(url, "sglang:spec_num_steps")
    try:
        assert await reader.get() == TIER_LINE
        assert await reader.get() == TIER_LINE * 3
    finally:
        await reader.close()
    assert metrics.connections == 1
    assert metrics.requests == ["GET /metrics?name%5B%5D=sglang%3Aspec_num_steps HTTP/1.1"] * 2


async def test_a_failed_answer_is_counted_and_the_next_reading_reconnects(
    fake: tuple[FakeMetrics, str],
) -> None:
    metrics, url = fake
    metrics.answers = [lambda: _plain("busy", "503 Service Unavailable")]
    tracker = ControllerTracker(url, interval_s=3600.0, tier_interval_s=0.02)
    tracker.start()
    await asyncio.sleep(0.3)
    await tracker.stop()
    assert tracker.tier_failed == 1
    assert len(tracker.tiers) >= 5 and set(tracker.tiers) == {1.0}
    assert metrics.connections >= 2  # the failed one closed, the readings went on over another


async def test_a_server_without_the_tier_gets_no_fast_reading(
    fake: tuple[FakeMetrics, str],
) -> None:
    metrics, url = fake
    metrics.answers = [lambda: _plain('vllm:generation_tokens_total{engine="0"} 10.0\n')] * 50
    tracker = ControllerTracker(url, interval_s=3600.0, tier_interval_s=0.02)
    tracker.start()
    await asyncio.sleep(0.3)
    await tracker.stop()
    # One fast request, answered without the tier: the reading stopped there.
    assert sum("name%5B%5D" in r for r in metrics.requests) == 1
    assert tracker.tiers == [] and tracker.tier_failed == 0
