"""Test connection: run the agent's ``probe`` through a host's (and container's) chain and
say what is there, or which hop failed.

A diagnostic, run synchronously from the admin with a hard time limit (see
``host_probe_many``); it reads the registry once, then never touches the ORM.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any, cast

from asgiref.sync import async_to_sync

from hosts.agent.parts.probe import ContainerFacts, NvidiaSmi, ProbeAnswer
from hosts.lifecycle.remote import Agent, AgentFailed
from hosts.models import Container, ContainerKind, Host, HostKind, ServerProfile
from hosts.transports.base import CommandTimeout, HopError, TransportError

PROBE_TIMEOUT_S = 20.0
# Interpreters of the profiles at one place whose engine versions are worth asking about.
MAX_PYTHONS = 4


@dataclass
class ProbeReport:
    """What one test connection found (``facts`` is the agent's answer when it ran)."""

    target: str
    chain: str
    ok: bool
    duration_s: float
    facts: ProbeAnswer | None = None
    error: str = ""
    hop_index: int | None = None
    hop_description: str = ""
    stderr_tail: str = ""
    failure: str = ""  # a FAILURE_CLASSES key when the failure is one of those
    hint: str = ""  # what to change, for that class

    @property
    def _nvidia_smi(self) -> NvidiaSmi | None:
        return self.facts.get("nvidia_smi") if self.facts else None

    @property
    def gpus(self) -> list[str]:
        smi = self._nvidia_smi
        return list((smi.get("gpus") if smi else None) or [])

    @property
    def gpu_error(self) -> str:
        smi = self._nvidia_smi
        return str((smi.get("error") if smi else None) or "")

    @property
    def container(self) -> ContainerFacts | None:
        return self.facts.get("container") if self.facts else None

    @property
    def engines(self) -> list[tuple[str, dict[str, object]]]:
        """(interpreter, {package: version or None}) for each interpreter asked."""
        return sorted(((self.facts.get("engines") if self.facts else None) or {}).items())


# What ssh (OpenSSH 9/10) prints for each class of first-hop failure, in the order they are
# told apart: a missing key file is followed by "Permission denied", so it is tested first.
FAILURE_CLASSES: dict[str, tuple[str, ...]] = {
    "host_key": (
        "host key verification failed",
        "remote host identification has changed",
        "host key is known for",
        "no matching key in known_hosts",
    ),
    "key_file": (
        "identity file",
        "load key",
        "unprotected private key file",
        "bad permissions",
    ),
    "auth": ("permission denied", "too many authentication failures", "invalid user"),
    "unreachable": (
        "connection refused",
        "connection timed out",
        "no route to host",
        "network is unreachable",
        "could not resolve hostname",
        "name or service not known",
    ),
}


def failure_class(report: ProbeReport) -> str:
    """The FAILURE_CLASSES key a failed probe's messages match, or "" (another failure)."""
    if report.ok:
        return ""
    text = f"{report.error}\n{report.stderr_tail}".lower()
    for name, markers in FAILURE_CLASSES.items():
        if any(marker in text for marker in markers):
            return name
    return ""


def failure_hint(kind: str, host: Host) -> str:
    """What to change, in the host's own terms, for one class of failure."""
    where = f"{host.address}:{host.ssh_port}"
    known_hosts = host.known_hosts_file or "~/.ssh/known_hosts of the dashboard's user"
    hints = {
        "host_key": (
            f"The host key of {where} is unknown or has changed. Check the key's fingerprint "
            f"with the host's administrator, then add it to {known_hosts} (ssh-keyscan -p "
            f"{host.ssh_port} {host.address}), or set the host's known-hosts policy."
        ),
        "key_file": (
            f"The identity file {host.identity_file or '(default)'} cannot be used: it must "
            "exist on the dashboard's machine, be readable by the user the dashboard runs as, "
            "and be a private key with mode 600."
        ),
        "auth": (
            f"{where} refused the login of user {host.ssh_user or '(the dashboard user)'}: "
            "check the SSH user, and that the public half of the identity file is in that "
            "user's ~/.ssh/authorized_keys on the host."
        ),
        "unreachable": (
            f"Nothing answered SSH at {where}: check the address and SSH port, that sshd runs "
            "there, and that no firewall or jump host is in the way."
        ),
    }
    return hints.get(kind, "")


@dataclass(frozen=True)
class _Target:
    label: str
    agent: Agent
    pythons: list[str]


def _pythons(host: Host, container: Container | None) -> list[str]:
    """The python interpreters the profiles at this place launch (their engine versions)."""
    profiles = ServerProfile.objects.filter(host=host, container=container).order_by("pk")
    found: list[str] = []
    for argv in profiles.values_list("launch_argv", flat=True):
        first = argv[0] if isinstance(argv, list) and argv else ""
        is_python = isinstance(first, str) and os.path.basename(first).startswith("python")
        if is_python and first not in found:
            found.append(first)
    return found[:MAX_PYTHONS]


def _target(host: Host, container: Container | None) -> _Target:
    if container is not None and container.kind == ContainerKind.NONE:
        container = None
    label = str(container) if container is not None else str(host)
    return _Target(label, Agent.for_host(host, container), _pythons(host, container))


async def _aprobe(target: _Target, timeout: float) -> ProbeReport:  # noqa: ASYNC109
    chain = target.agent.transport.describe()
    started = time.monotonic()

    def report(ok: bool, **fields: Any) -> ProbeReport:
        return ProbeReport(target.label, chain, ok, time.monotonic() - started, **fields)

    try:
        # The agent call and the hop-by-hop diagnosis after a failure share one deadline.
        async with asyncio.timeout(timeout):
            answer = await target.agent.call(
                "probe", {"pythons": target.pythons}, timeout=timeout - 2
            )
    except HopError as exc:
        return report(
            False,
            error=str(exc),
            hop_index=exc.hop_index,
            hop_description=exc.hop_description,
            stderr_tail=exc.stderr_tail,
        )
    except (TimeoutError, CommandTimeout):
        return report(False, error=f"{chain}: no answer within {timeout:g} s")
    except (TransportError, AgentFailed) as exc:
        return report(False, error=str(exc))
    # The shape the agent's probe declares (checked there, where it is built).
    return report(True, facts=cast(ProbeAnswer, answer))


def _refused(label: str, exc: TransportError) -> ProbeReport:
    # A stored value the transport refuses (a row written before the model validated it, or
    # by hand) is that target's answer, not a crash of the whole batch.
    return ProbeReport(label, "", False, 0.0, error=f"cannot build the connection: {exc}")


async def _aprobe_many(
    targets: list[_Target | ProbeReport],
    timeout: float,  # noqa: ASYNC109
) -> list[ProbeReport]:
    async def one(target: _Target | ProbeReport) -> ProbeReport:
        return target if isinstance(target, ProbeReport) else await _aprobe(target, timeout)

    return list(await asyncio.gather(*(one(t) for t in targets)))


def host_probe_many(
    *,
    targets: list[tuple[Host, Container | None]],
    timeout: float = PROBE_TIMEOUT_S,
) -> list[ProbeReport]:
    """Test the connection to each (host, container) at once, waiting at most ``timeout``
    seconds in all: hostname, user, container detection, GPUs, engine versions, or the hop
    that failed. Synchronous (for the admin); never raises for an unreachable target."""
    prepared: list[_Target | ProbeReport] = []
    for host, container in targets:
        try:
            prepared.append(_target(host, container))
        except TransportError as exc:
            prepared.append(_refused(str(container) if container is not None else str(host), exc))
    reports = async_to_sync(_aprobe_many)(prepared, timeout)
    for report, (host, _) in zip(reports, targets, strict=True):
        # Only the first hop is the host's own SSH; a container hop's failure has its own words.
        if host.kind == HostKind.SSH and report.hop_index in (None, 1):
            report.failure = failure_class(report)
            report.hint = failure_hint(report.failure, host)
    return reports


def host_probe(
    *, host: Host, container: Container | None = None, timeout: float = PROBE_TIMEOUT_S
) -> ProbeReport:
    """Test the connection to one host, or to one container on it."""
    return host_probe_many(targets=[(host, container)], timeout=timeout)[0]
