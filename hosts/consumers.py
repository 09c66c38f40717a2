from __future__ import annotations

from typing import Any, cast

from channels.db import database_sync_to_async

from hosts import selectors
from specdash import realtime
from specdash.consumers import ViewerConsumer


class InstanceConsumer(ViewerConsumer):
    """Live state, history and log tail of one server instance."""

    def group_name(self) -> str:
        return realtime.instance_group(self.scope["url_route"]["kwargs"]["instance_id"])

    async def snapshot(self) -> dict[str, Any] | None:
        instance_id = self.scope["url_route"]["kwargs"]["instance_id"]
        snapshot = await database_sync_to_async(selectors.instance_snapshot)(
            instance_id=instance_id
        )
        return cast(dict[str, Any] | None, snapshot)

    async def instance_state(self, event: dict[str, Any]) -> None:
        await self.forward(event)

    async def instance_event(self, event: dict[str, Any]) -> None:
        await self.forward(event)

    async def instance_log(self, event: dict[str, Any]) -> None:
        await self.forward(event)

    async def instance_readiness(self, event: dict[str, Any]) -> None:
        await self.forward(event)
