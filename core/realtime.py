"""The one module that owns the channel layer: group names, event payloads, broadcasting.

Services call ``broadcast_on_commit`` (sync) or ``abroadcast`` (async); consumers join the
groups named here. Payloads are plain JSON. High-rate data (samples) is batched by the
producer to about one message a second, never one message per request.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)


def instance_group(instance_id: int) -> str:
    return f"instance-{instance_id}"


def sweep_group(sweep_id: int) -> str:
    return f"sweep-{sweep_id}"


def experiment_group(experiment_id: int) -> str:
    return f"experiment-{experiment_id}"


def _message(event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
    # Channels dispatches {"type": "sweep.sample"} to a consumer method ``sweep_sample``.
    return {"type": event_type, "payload": payload}


async def abroadcast(group: str, event_type: str, payload: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(group, _message(event_type, payload))
    except Exception:  # a full or unreachable layer must never break the job that reports
        logger.warning("broadcast to %s failed", group, exc_info=True)


def broadcast(group: str, event_type: str, payload: dict[str, Any]) -> None:
    async_to_sync(abroadcast)(group, event_type, payload)


def broadcast_on_commit(group: str, event_type: str, payload: dict[str, Any]) -> None:
    """Emit after the surrounding transaction commits, so a client that reacts to the event
    and reads the database sees the change (Zulip's rule)."""
    transaction.on_commit(lambda: broadcast(group, event_type, payload))


# Sweep events. Payloads are built by benchmarks.selectors and forwarded by SweepConsumer as
# they are: {"type": "sweep.samples", "sweep_id": ..., "samples": [...]} on the wire.
SWEEP_SAMPLES = "sweep.samples"  # {"sweep_id", "samples": [sample, ...]}: one batch a second
SWEEP_LEVEL = "sweep.level"  # {"sweep_id", "level": {...}, "progress": {...}}
SWEEP_STATE = "sweep.state"  # {"sweep_id", "sweep": {...}, "progress": {...}}
# Producers of live samples buffer them and send one batch per interval.
SAMPLE_BATCH_SECONDS = 1.0


def sweep_broadcast_on_commit(sweep_id: int, event_type: str, payload: dict[str, Any]) -> None:
    broadcast_on_commit(sweep_group(sweep_id), event_type, {"sweep_id": sweep_id, **payload})


# Telemetry: one group per host carries its GPU and host-load samples and the server metrics of
# its instances; payloads are built by hosts.telemetry.selectors. The host's manager sends one
# batch per GPU tick (about once a second): {"host_id", "sent_at", "samples": [sample, ...]}.
TELEMETRY_SAMPLES = "telemetry.samples"


def telemetry_group(host_id: int) -> str:
    return f"telemetry-host-{host_id}"
