from __future__ import annotations

# The per-second /metrics scrape of controller tracking (benchlib.stats.controller): from a
# level's opening until its end, once a second on a drift-free schedule, keeping only the few
# tracked values of each scrape (not its text). One keep-alive connection for the level (a new
# connection a second would cost the server more than the scrape) that is closed at its end,
# so none outlives the level on the server's port. A failed scrape is counted and skipped: a
# gap in the series, never a failed level.
import asyncio
import contextlib
import time
from typing import Any

import httpx

from benchlib.stats.controller import INTERVAL_S, controller_figures, scrape_values

# A scrape that takes longer than the period is abandoned: the next one is due.
SCRAPE_TIMEOUT_S = 0.9


class ControllerTracker:
    """Scrapes ``url`` every ``interval_s`` between ``start`` and ``stop``."""

    def __init__(self, url: str, *, interval_s: float = INTERVAL_S) -> None:
        self.url = url
        self.interval_s = interval_s
        self.times: list[float] = []
        self.scrapes: list[dict[str, float]] = []
        self.failed = 0
        self.opened_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None

    def start(self) -> None:
        self.opened_at = time.time()
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(SCRAPE_TIMEOUT_S), limits=limits, trust_env=False
        )
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            await self._scrape()
            next_at += self.interval_s
            now = loop.time()
            if next_at < now:  # a slow scrape: skip the missed ticks, keep the phase
                next_at += self.interval_s * (int((now - next_at) / self.interval_s) + 1)
            await asyncio.sleep(next_at - now)

    async def _scrape(self) -> None:
        assert self._client is not None
        try:
            response = await self._client.get(self.url)
            response.raise_for_status()
        except httpx.HTTPError:
            self.failed += 1
            return
        self.times.append(time.time())
        self.scrapes.append(scrape_values(response.text))

    async def stop(self) -> dict[str, Any] | None:
        """End the scraping (one last scrape closes the series) and return the level's
        figures, or None when the server exports no speculative figures."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._client is None:
            return None
        try:
            await self._scrape()
        finally:
            await self._client.aclose()
            self._client = None
        figures = controller_figures(self.times, self.scrapes, opened_at=self.opened_at)
        if figures is not None:
            figures["failed_scrapes"] = self.failed
        return figures
