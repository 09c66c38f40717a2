from __future__ import annotations

from hosts.models.instances import GpuClaim, InstanceEvent, InstanceState, ServerInstance
from hosts.models.jobs import Job, JobEvent, JobHook, JobState
from hosts.models.registry import Container, ContainerKind, Engine, Host, HostKind, ServerProfile
from hosts.models.telemetry import TelemetryKind, TelemetrySample, TelemetryWatch
from hosts.models.tokens import ApiToken

__all__ = [
    "ApiToken",
    "Container",
    "ContainerKind",
    "Engine",
    "GpuClaim",
    "Host",
    "HostKind",
    "InstanceEvent",
    "InstanceState",
    "Job",
    "JobEvent",
    "JobHook",
    "JobState",
    "ServerInstance",
    "ServerProfile",
    "TelemetryKind",
    "TelemetrySample",
    "TelemetryWatch",
]
