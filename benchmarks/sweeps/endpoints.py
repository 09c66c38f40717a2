"""Readiness of a server specdash did not start (an endpoint profile's).

Nothing tells specdash when such a server goes away (no lifecycle watches its process), so
the sweep asks its readiness URL itself: once before the first level (a server that is down
fails the sweep before any load, naming the URL and what it answered) and then every few
seconds while levels run, cutting the sweep when it stops answering several times in a row
(one slow answer under full load is not a death).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class EndpointCheck:
    url: str  # the readiness URL: the base URL plus the profile's readiness path
    status: int  # the status that means ready


@dataclass
class EndpointWatchSettings:
    poll_seconds: float = 5.0
    # A readiness request under full load can be slow: generous, and several misses in a row.
    timeout_seconds: float = 10.0
    misses_to_fail: int = 3


WATCH = EndpointWatchSettings()


async def endpoint_problem(check: EndpointCheck, *, request_timeout_s: float) -> str:
    """ "" when the readiness URL answers the expected status, else what happened."""
    # No keep-alive: a pooled connection would sit on the server's port between checks.
    limits = httpx.Limits(max_keepalive_connections=0)
    try:
        timeout = httpx.Timeout(request_timeout_s)
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
            response = await client.get(check.url)
    except httpx.HTTPError as exc:
        return f"{check.url} did not answer ({type(exc).__name__}: {exc})".rstrip(": )") + ")"
    if response.status_code != check.status:
        return f"{check.url} answered {response.status_code}, not {check.status}"
    return ""


def not_ready_reason(problem: str) -> str:
    return (
        f"the endpoint is not ready: {problem} (its server runs outside specdash; start it "
        "where it runs, then re-run)"
    )


async def watch_endpoint(check: EndpointCheck, settings: EndpointWatchSettings) -> str:
    """Return why the endpoint stopped being ready (after ``misses_to_fail`` misses in a row)."""
    misses = 0
    while True:
        await asyncio.sleep(settings.poll_seconds)
        problem = await endpoint_problem(check, request_timeout_s=settings.timeout_seconds)
        misses = misses + 1 if problem else 0
        if misses >= settings.misses_to_fail:
            return f"the endpoint stopped answering its readiness check: {problem}"
