"""The host a telemetry job probes: how to reach it and how to run a probe's argv there."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from hosts.lifecycle.remote import transport_for, with_host_env
from hosts.models import Host, HostKind
from hosts.transports.base import Transport


@dataclass(frozen=True)
class HostTarget:
    host_id: int
    local: bool
    transport: Transport
    wrap: Callable[[list[str]], list[str]]


def load_target(host_id: int) -> HostTarget | None:
    host = Host.objects.filter(pk=host_id).first()
    if host is None:
        return None
    return HostTarget(
        host_id=host.pk,
        local=host.kind == HostKind.LOCAL,
        transport=transport_for(host, None),
        wrap=partial(with_host_env, path_prepend=host.path_prepend, env=dict(host.command_env)),
    )
