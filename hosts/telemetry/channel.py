"""The ``telemetry.samples`` event of a host's telemetry group on the channel layer
(core.realtime), with the declared shape of its payload. ``hosts.telemetry.service`` sends
one batch per GPU tick (about once a second) after commit; ``hosts.consumers.TelemetryConsumer``
forwards it to the host, instance and sweep pages as it is."""

from __future__ import annotations

from typing import TypedDict

from core.realtime import ChannelEvent
from hosts.telemetry.selectors import TelemetrySampleRow


class TelemetrySamplesPayload(TypedDict):
    host_id: int
    sent_at: float  # epoch seconds the batch was sent at (after its rows were stored)
    samples: list[TelemetrySampleRow]


TELEMETRY_SAMPLES = ChannelEvent("telemetry.samples", TelemetrySamplesPayload)
