"""The async face of ``core`` for the websocket consumers: an ``async`` twin of each role check
they make, in the manner of contrib.sessions' ``load`` / ``aload`` (the job queue's twins are
in ``core.jobs.store``).

Consumer twins wrap with Channels' ``database_sync_to_async``, which closes stale database
connections around the call: a consumer lives as long as its socket, far longer than a
request.
"""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from core import roles


async def acan_view(user: Any) -> bool:
    return bool(await database_sync_to_async(roles.can_view)(user))
