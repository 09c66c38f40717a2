"""The base of every websocket consumer: authentication, role check, subscribe, snapshot, events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from channels.generic.websocket import AsyncJsonWebsocketConsumer, AsyncWebsocketConsumer

from core import store
from core.realtime import ChannelMessage

# Close codes in the 4000-4999 application range.
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404


class ViewerConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """Accepts authenticated viewers, joins ``group_name()``, then sends ``snapshot()`` first.

    A client that connects mid-run thus gets the state so far, then the live events (some of
    which the snapshot may already show).
    Subclasses implement ``group_name`` and ``snapshot`` and one handler per event type.
    """

    group: str = ""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await store.acan_view(user):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        # Subscribe first, then read the state (Zulip's rule): an event committed after the
        # snapshot was read is then delivered, and one committed in between is at worst
        # delivered as well as shown in the snapshot, which the pages apply idempotently.
        # Events queue on this channel until connect() returns, so they follow the snapshot.
        group = await self.resolve_group()
        if group is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = group
        await self.channel_layer.group_add(self.group, self.channel_name)
        snapshot = await self.snapshot()
        if snapshot is None:
            await self.channel_layer.group_discard(self.group, self.channel_name)
            self.group = ""
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.accept()
        await self.send_json({"type": "snapshot", **snapshot})

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        # A frame that is not a JSON text used to end the socket with a server error: it is
        # ignored, as anything a viewer's page would not send.
        if text_data is None:
            return
        try:
            content = await self.decode_json(text_data)
        except ValueError:
            return
        await self.receive_json(content, **kwargs)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        # Viewers only listen; actions go through views/API so they are permission-checked,
        # logged and CSRF-protected in one place.
        return None

    def group_name(self) -> str:
        raise NotImplementedError

    async def resolve_group(self) -> str | None:
        """The group to join before the snapshot is read; None when there is nothing to watch.
        A consumer whose group needs a lookup (the host behind a page) overrides this."""
        return self.group_name()

    async def snapshot(self) -> Mapping[str, object] | None:
        # Each page's own shape (a TypedDict where its selector builds it), sent as it is.
        raise NotImplementedError

    async def forward(self, event: ChannelMessage) -> None:
        await self.send_json({"type": event["type"], **event.get("payload", {})})


class NotFoundConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
    """Every websocket path no app routes: closed with 4404 (the router raised, a 500)."""

    async def connect(self) -> None:
        await self.close(code=CLOSE_NOT_FOUND)
