from __future__ import annotations

from hosts.transports.base import (
    CommandFailed,
    CommandResult,
    CommandTimeout,
    Hop,
    HopError,
    LineStream,
    Transport,
    TransportConfigError,
    TransportError,
)
from hosts.transports.chain import HopSpec, build_chain
from hosts.transports.containers import ContainerHop
from hosts.transports.local import LocalTransport
from hosts.transports.script import BASH, PYTHON, SH, ScriptResult, diagnose, run_script
from hosts.transports.ssh import SSHTransport

# Pluggable async transports: run argv here, over ssh, and inside containers, as a chain.
# Plain Python; nothing here imports Django.


__all__ = [
    "BASH",
    "PYTHON",
    "SH",
    "CommandFailed",
    "CommandResult",
    "CommandTimeout",
    "ContainerHop",
    "Hop",
    "HopError",
    "HopSpec",
    "LineStream",
    "LocalTransport",
    "SSHTransport",
    "ScriptResult",
    "Transport",
    "TransportConfigError",
    "TransportError",
    "build_chain",
    "diagnose",
    "run_script",
]
