"""The async face of ``hosts`` for its websocket consumers: an ``async`` twin of each selector
they read, in the manner of contrib.sessions' ``load`` / ``aload`` (the lifecycle jobs' twins
are in ``hosts.lifecycle.store``, telemetry's in ``hosts.telemetry.store``).

Consumer twins wrap with Channels' ``database_sync_to_async``, which closes stale database
connections around the call: a consumer lives as long as its socket, far longer than a request.
"""

from __future__ import annotations

from channels.db import database_sync_to_async

from hosts import selectors
from hosts.selectors import InstanceSnapshot


async def ainstance_snapshot(*, instance_id: int) -> InstanceSnapshot | None:
    snapshot: InstanceSnapshot | None = await database_sync_to_async(selectors.instance_snapshot)(
        instance_id=instance_id
    )
    return snapshot
