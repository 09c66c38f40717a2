"""The one module that owns the channel layer: group names, event types, broadcasting.

Each event type is declared once, as a ``ChannelEvent`` with the ``TypedDict`` of its payload,
in the module of the app that produces it (``benchmarks.sweeps.channel``,
``benchmarks.experiments.events``, ``hosts.channel``, ``hosts.telemetry.channel``): core
imports no app, so the payload types that reuse an app's rows live with that app. Producers
send through the declaration (``SWEEP_LEVEL.broadcast_on_commit(group, payload)``), so mypy
checks every payload against its type, and a test checks every message sent at run time
against the declaration registered here under its name (tests/core/test_channel_payloads.py).
Payloads are plain JSON. High-rate data (samples) is batched by the producer to about one
message a second, never one message per request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypedDict, TypeVar

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)

# A TypedDict is a Mapping[str, object] to mypy and a plain dict at run time.
Payload = TypeVar("Payload", bound=Mapping[str, object])

_DECLARED: dict[str, type[Mapping[str, object]]] = {}


@dataclass(frozen=True)
class ChannelEvent(Generic[Payload]):
    """One event type of the channel layer and the declared shape of its payload.

    Channels dispatches ``{"type": "sweep.samples"}`` to a consumer method ``sweep_samples``,
    which forwards ``{"type": name, **payload}`` to the page as it is.
    """

    name: str
    payload: type[Payload]

    def __post_init__(self) -> None:
        # Declared once: a second declaration of a name would let two shapes claim one event.
        if self.name in _DECLARED:
            raise ValueError(f"channel event {self.name!r} is declared twice")
        _DECLARED[self.name] = self.payload

    async def abroadcast(self, group: str, payload: Payload) -> None:
        await abroadcast(group, self.name, payload)

    def broadcast(self, group: str, payload: Payload) -> None:
        broadcast(group, self.name, payload)

    def broadcast_on_commit(self, group: str, payload: Payload) -> None:
        """Emit after the surrounding transaction commits, so a client that reacts to the
        event and reads the database sees the change (Zulip's rule)."""
        broadcast_on_commit(group, self.name, payload)


def declared_events() -> Mapping[str, type[Mapping[str, object]]]:
    """Every event type declared so far (by the modules imported so far), by name."""
    return dict(_DECLARED)


def instance_group(instance_id: int) -> str:
    return f"instance-{instance_id}"


def sweep_group(sweep_id: int) -> str:
    return f"sweep-{sweep_id}"


def experiment_group(experiment_id: int) -> str:
    return f"experiment-{experiment_id}"


def telemetry_group(host_id: int) -> str:
    """One group per host carries its GPU and host-load samples and the server metrics of its
    instances (``hosts.telemetry.channel``)."""
    return f"telemetry-host-{host_id}"


# Producers of live samples buffer them and send one batch per interval.
SAMPLE_BATCH_SECONDS = 1.0


# The transport under the declarations: producers call a ChannelEvent's methods, which pass
# its name here, rather than these with a name of their own.


class ChannelMessage(TypedDict):
    """What goes through the layer; consumers forward ``{"type": type, **payload}``."""

    type: str
    payload: Mapping[str, object]


def _message(event_type: str, payload: Mapping[str, object]) -> ChannelMessage:
    return {"type": event_type, "payload": payload}


async def abroadcast(group: str, event_type: str, payload: Mapping[str, object]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(group, _message(event_type, payload))
    except Exception:  # a full or unreachable layer must never break the job that reports
        logger.warning("broadcast to %s failed", group, exc_info=True)


def broadcast(group: str, event_type: str, payload: Mapping[str, object]) -> None:
    async_to_sync(abroadcast)(group, event_type, payload)


def broadcast_on_commit(group: str, event_type: str, payload: Mapping[str, object]) -> None:
    transaction.on_commit(lambda: broadcast(group, event_type, payload))
