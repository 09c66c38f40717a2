from __future__ import annotations

from typing import Any

from core import realtime
from core.consumers import ViewerConsumer
from hosts import store
from hosts.selectors import InstanceSnapshot
from hosts.telemetry import store as telemetry_store
from hosts.telemetry.selectors import TelemetrySnapshot


class InstanceConsumer(ViewerConsumer):
    """Live state, history and log tail of one server instance."""

    def group_name(self) -> str:
        return realtime.instance_group(self.scope["url_route"]["kwargs"]["instance_id"])

    async def snapshot(self) -> InstanceSnapshot | None:
        instance_id = self.scope["url_route"]["kwargs"]["instance_id"]
        return await store.ainstance_snapshot(instance_id=instance_id)

    # Each event goes to the page as it is (Channels calls the method named after its type).
    instance_state = instance_event = instance_log = instance_readiness = ViewerConsumer.forward


class TelemetryConsumer(ViewerConsumer):
    """Live GPU, host and server samples of the host behind a host, instance or sweep page.

    Connecting as an operator claims the host's probes (and starts them if needed); the page
    renews that claim by sending ``{"type": "keepalive"}`` while it stays open. A viewer's
    page only reads: it never makes the dashboard probe a host (telemetry_subscribe).
    """

    host_id: int | None = None

    def group_name(self) -> str:
        assert self.host_id is not None
        return realtime.telemetry_group(self.host_id)

    async def resolve_group(self) -> str | None:
        kwargs = self.scope["url_route"]["kwargs"]
        window = await telemetry_store.atelemetry_window(target=kwargs["target"], pk=kwargs["pk"])
        if window is None:
            return None
        self.host_id = window.host_id
        return self.group_name()

    async def snapshot(self) -> TelemetrySnapshot | None:
        kwargs = self.scope["url_route"]["kwargs"]
        snapshot = await telemetry_store.atelemetry_subscribe(
            target=kwargs["target"], pk=kwargs["pk"], user=self.scope["user"]
        )
        if snapshot is not None:
            self.host_id = int(snapshot["host_id"])
        return snapshot

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        keepalive = isinstance(content, dict) and content.get("type") == "keepalive"
        if keepalive and self.host_id is not None:
            await telemetry_store.atelemetry_keepalive(
                host_id=self.host_id, user=self.scope["user"]
            )

    telemetry_samples = ViewerConsumer.forward
