from __future__ import annotations

# The per-second /metrics scrape of controller tracking (benchlib.stats.controller): from a
# level's opening until its end, once a second on a drift-free schedule, keeping only the few
# tracked values of each scrape (not its text). One keep-alive connection for the level (a new
# connection a second would cost the server more than the scrape) that is closed at its end,
# so none outlives the level on the server's port. A failed scrape is counted and skipped: a
# gap in the series, never a failed level.
#
# Beside it, a fast read of SGLang's tier gauge alone every TIER_INTERVAL_S on a second
# keep-alive connection, asking /metrics for that one family (``name[]``, which the
# prometheus_client behind SGLang's /metrics honours), so the answer is a few hundred bytes:
# the switches are found in these readings, which see a flap out and back shorter than a
# second. It stops at its first answer without the tier (no speculation, or vLLM, whose
# counters are read once a second only).
import asyncio
import contextlib
import ssl
import time
import urllib.parse
from collections.abc import Awaitable, Callable

import httpx

from benchlib.stats.controller import (
    INTERVAL_S,
    SGLANG_TIER,
    TIER_INTERVAL_S,
    controller_figures,
    scrape_values,
    tier_reading,
)
from benchlib.stats.controller_types import ControllerFigures

# A scrape that takes longer than the period is abandoned: the next one is due.
SCRAPE_TIMEOUT_S = 0.9


class ControllerTracker:
    """Scrapes ``url`` every ``interval_s`` between ``start`` and ``stop``."""

    def __init__(
        self, url: str, *, interval_s: float = INTERVAL_S, tier_interval_s: float = TIER_INTERVAL_S
    ) -> None:
        self.url = url
        self.interval_s = interval_s
        self.tier_interval_s = tier_interval_s
        self.times: list[float] = []
        self.scrapes: list[dict[str, float]] = []
        self.failed = 0
        self.tier_times: list[float] = []
        self.tiers: list[float] = []
        self.tier_failed = 0
        self.opened_at = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        self._client: httpx.AsyncClient | None = None
        self._tier_reader: FamilyReader | None = None

    def start(self) -> None:
        self.opened_at = time.time()
        self._client = _one_connection_client()
        self._tier_reader = FamilyReader(self.url, SGLANG_TIER)
        self._tasks = [
            asyncio.ensure_future(_every(self.interval_s, self._scrape)),
            asyncio.ensure_future(_every(self.tier_interval_s, self._read_tier)),
        ]

    async def _read_tier(self) -> bool:
        assert self._tier_reader is not None
        try:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancel that
            # lands as the answer completes, and at 20 readings a second stop() then waited on
            # a reading loop that never ended.
            async with asyncio.timeout(SCRAPE_TIMEOUT_S):
                text = await self._tier_reader.get()
        except (OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
            await self._tier_reader.close()  # the next reading opens a new connection
            self.tier_failed += 1
            return True
        tier = tier_reading(text)
        if tier is None:
            return False  # no tier exported: nothing faster to read
        self.tier_times.append(time.time())
        self.tiers.append(tier)
        return True

    async def _scrape(self) -> bool:
        assert self._client is not None
        try:
            response = await self._client.get(self.url)
            response.raise_for_status()
        except httpx.HTTPError:
            self.failed += 1
            return True
        self.times.append(time.time())
        self.scrapes.append(scrape_values(response.text))
        return True

    async def stop(self) -> ControllerFigures | None:
        """End the scraping (one last scrape closes the series) and return the level's
        figures, or None when the server exports no speculative figures."""
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._client is None or self._tier_reader is None:
            return None
        try:
            await self._scrape()
        finally:
            await self._client.aclose()
            await self._tier_reader.close()
            self._client, self._tier_reader = None, None
        figures = controller_figures(
            self.times,
            self.scrapes,
            opened_at=self.opened_at,
            tier_times=self.tier_times,
            tiers=self.tiers,
            tier_interval_s=self.tier_interval_s,
        )
        if figures is not None:
            figures["failed_scrapes"] = self.failed
            figures["failed_tier_readings"] = self.tier_failed
        return figures


def _one_connection_client() -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return httpx.AsyncClient(
        timeout=httpx.Timeout(SCRAPE_TIMEOUT_S), limits=limits, trust_env=False
    )


async def _every(interval_s: float, action: Callable[[], Awaitable[bool]]) -> None:
    """Runs ``action`` every ``interval_s`` on a drift-free schedule until it returns False."""
    loop = asyncio.get_running_loop()
    next_at = loop.time()
    while await action():
        next_at += interval_s
        now = loop.time()
        if next_at < now:  # a slow answer: skip the missed ticks, keep the phase
            next_at += interval_s * (int((now - next_at) / interval_s) + 1)
        await asyncio.sleep(next_at - now)


class FamilyReader:
    """GET ``url?name[]=family`` over one keep-alive HTTP/1.1 connection, written as fixed
    bytes and read by its Content-Length (or chunks): the fast tier reading runs 20 times a
    second, where a general client's per-request work (about 2.5 ms of CPU with httpx here,
    perf/bench_tier_reading.py) would be the largest cost of the tracking."""

    def __init__(self, url: str, family: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host = parts.hostname or "localhost"
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        query = urllib.parse.urlencode([*urllib.parse.parse_qsl(parts.query), ("name[]", family)])
        target = (parts.path or "/") + "?" + query
        host = parts.netloc.rsplit("@", 1)[-1]
        self.request = (
            f"GET {target} HTTP/1.1\r\nHost: {host}\r\nAccept: text/plain\r\n\r\n".encode()
        )
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def get(self) -> str:
        """The answer's text; raises OSError, ValueError (not a 200, or a malformed answer) or
        IncompleteReadError, after which the caller closes the connection."""
        if self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, ssl=ssl.create_default_context() if self.tls else None
            )
        assert self._reader is not None
        self._writer.write(self.request)
        head = (await self._reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        status, *fields = head.split("\r\n")
        if status.split(" ", 2)[1:2] != ["200"]:
            raise ValueError(f"/metrics answered {status!r}")
        headers = dict(
            (name.strip().lower(), value.strip())
            for name, _, value in (f.partition(":") for f in fields if f)
        )
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = await self._chunks()
        else:
            body = await self._reader.readexactly(int(headers["content-length"]))
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return body.decode()

    async def _chunks(self) -> bytes:
        assert self._reader is not None
        body = b""
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            chunk = await self._reader.readexactly(size + 2)  # the chunk and its CRLF
            if size == 0:
                return body
            body += chunk[:-2]

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
