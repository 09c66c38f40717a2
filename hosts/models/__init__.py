from __future__ import annotations

from hosts.models.instances import GpuClaim, InstanceEvent, InstanceState, ServerInstance
from hosts.models.jobs import Job, JobState
from hosts.models.registry import Container, ContainerKind, Engine, Host, HostKind, ServerProfile

__all__ = [
    "Container",
    "ContainerKind",
    "Engine",
    "GpuClaim",
    "Host",
    "HostKind",
    "InstanceEvent",
    "InstanceState",
    "Job",
    "JobState",
    "ServerInstance",
    "ServerProfile",
]
