from __future__ import annotations

from hosts.models.instances import GpuClaim, InstanceEvent, InstanceState, ServerInstance
from hosts.models.registry import (
    Container,
    ContainerKind,
    Engine,
    Host,
    HostKind,
    ProfileKind,
    ServerProfile,
)
from hosts.models.telemetry import TelemetryKind, TelemetrySample, TelemetryWatch

__all__ = [
    "Container",
    "ContainerKind",
    "Engine",
    "GpuClaim",
    "Host",
    "HostKind",
    "InstanceEvent",
    "InstanceState",
    "ProfileKind",
    "ServerInstance",
    "ServerProfile",
    "TelemetryKind",
    "TelemetrySample",
    "TelemetryWatch",
]
