from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from hosts.transports.base import Transport, TransportConfigError
from hosts.transports.containers import KINDS, ContainerHop
from hosts.transports.local import LocalTransport
from hosts.transports.ssh import HostKeyPolicy, SSHTransport

HopKind = Literal["ssh", "pct", "lxc-attach", "docker", "incus"]
_SSH_ONLY = ("user", "port", "identity_file", "known_hosts_file", "jump")


@dataclass(frozen=True)
class HopSpec:
    """One hop as plain data: ``target`` is the host for ssh, the CT id or container name
    for the others. Fields that do not apply to ``kind`` must stay unset."""

    kind: HopKind
    target: str
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    known_hosts_file: str | None = None
    host_key_policy: HostKeyPolicy = "strict"
    jump: str | None = None
    tool: str | None = None
    clear_env: bool = False


def build_hop(spec: HopSpec, inner: Transport, *, control_dir: str | None = None) -> Transport:
    if spec.kind == "ssh":
        if spec.clear_env:
            raise TransportConfigError("clear_env does not apply to an ssh hop")
        return SSHTransport(
            spec.target,
            user=spec.user,
            port=spec.port,
            identity_file=spec.identity_file,
            known_hosts_file=spec.known_hosts_file,
            host_key_policy=spec.host_key_policy,
            jump=spec.jump,
            control_dir=control_dir,
            ssh_path=spec.tool or "ssh",
            inner=inner,
        )
    if spec.kind not in KINDS:
        raise TransportConfigError(f"unknown hop kind: {spec.kind!r}")
    misplaced = [name for name in _SSH_ONLY if getattr(spec, name) is not None]
    if misplaced or spec.host_key_policy != "strict":
        fields = ", ".join(misplaced or ["host_key_policy"])
        raise TransportConfigError(f"{spec.kind} hop {spec.target}: ssh settings set: {fields}")
    return ContainerHop(
        spec.kind, spec.target, inner=inner, tool=spec.tool, clear_env=spec.clear_env
    )


def build_chain(
    specs: Sequence[HopSpec],
    *,
    base: Transport | None = None,
    control_dir: str | os.PathLike[str] | None = None,
) -> Transport:
    """The transport for ``specs``, listed from this machine outwards (ssh first, then the
    containers inside); no specs gives ``base``, by default a ``LocalTransport``."""
    transport = base if base is not None else LocalTransport()
    directory = os.fspath(control_dir) if control_dir is not None else None
    for spec in specs:
        transport = build_hop(spec, transport, control_dir=directory)
    return transport
