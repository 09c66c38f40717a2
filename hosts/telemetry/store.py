"""The telemetry app's async face onto the database: an ``async`` twin of each service and
selector that the `telemetry.host` job and the telemetry socket await, in the manner of
contrib.sessions' ``load`` / ``aload``.

This module is the one place telemetry wraps synchronous code, so ``manager.py`` and the
consumer read as plain ``await store.x(...)`` and never touch the ORM. The job's twins are
their sync function wrapped once (asgiref types the wrap with the function's parameters, so the
two cannot drift apart). The consumer's wrap with Channels' ``database_sync_to_async``, which
closes stale database connections around the call: a socket lives far longer than a request.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async

from hosts.telemetry import selectors, service, targets
from hosts.telemetry.selectors import TelemetrySnapshot

aload_target = sync_to_async(targets.load_target)
atelemetry_host_plan = sync_to_async(selectors.telemetry_host_plan)
atelemetry_samples_record = sync_to_async(service.telemetry_samples_record)
atelemetry_prune = sync_to_async(service.telemetry_prune)
atelemetry_host_ensure = sync_to_async(service.telemetry_host_ensure)


async def atelemetry_window(*, target: str, pk: int) -> selectors.Window | None:
    window: selectors.Window | None = await database_sync_to_async(selectors.telemetry_window)(
        target=target, pk=pk
    )
    return window


async def atelemetry_subscribe(*, target: str, pk: int, user: Any) -> TelemetrySnapshot | None:
    snapshot: TelemetrySnapshot | None = await database_sync_to_async(service.telemetry_subscribe)(
        target=target, pk=pk, user=user
    )
    return snapshot


async def atelemetry_keepalive(*, host_id: int, user: Any) -> bool:
    return bool(
        await database_sync_to_async(service.telemetry_keepalive)(host_id=host_id, user=user)
    )
