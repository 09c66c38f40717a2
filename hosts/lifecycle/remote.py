"""Talking to a host: the transport chain for a host/container, and the far-side agent."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from django.conf import settings

from benchlib.json_types import JsonObject
from hosts.agent import AGENT_SOURCE
from hosts.models import Container, ContainerKind, Host, HostKind
from hosts.transports.base import Transport, TransportError, tail
from hosts.transports.chain import HopSpec, build_chain
from hosts.transports.script import run_script

# A constant wrapper (never built from input): puts the host's directories first on PATH,
# then runs the rest of argv, which starts with `env NAME=value ...`. Values arrive as argv
# items, so nothing in them is ever parsed by a shell.
_PATH_WRAPPER = 'if [ -n "$1" ]; then PATH="$1:$PATH"; export PATH; fi; shift; exec "$@"'


def with_host_env(argv: list[str], *, path_prepend: str, env: dict[str, str]) -> list[str]:
    """argv behind the PATH wrapper and `env NAME=value ...` of a host's settings."""
    assignments = [f"{name}={value}" for name, value in sorted(env.items())]
    return ["sh", "-c", _PATH_WRAPPER, "specdash-env", path_prepend, "env", *assignments, *argv]


def hop_specs(host: Host, container: Container | None) -> list[HopSpec]:
    specs: list[HopSpec] = []
    if host.kind == HostKind.SSH:
        specs.append(
            HopSpec(
                kind="ssh",
                target=host.address,
                user=host.ssh_user or None,
                port=host.ssh_port,
                identity_file=host.identity_file or None,
                known_hosts_file=host.known_hosts_file or None,
                host_key_policy="accept-new"
                if host.known_hosts_policy == "accept-new"
                else "strict",
                jump=host.jump_host or None,
            )
        )
    if container is not None and container.kind != ContainerKind.NONE:
        specs.append(HopSpec(kind=container.kind, target=container.ident))  # type: ignore[arg-type]
    return specs


def transport_for(host: Host, container: Container | None) -> Transport:
    control_dir = Path(settings.VAR_DIR) / "ssh-control"
    control_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    return build_chain(hop_specs(host, container), control_dir=control_dir)


class AgentFailed(Exception):
    """The agent ran but answered ok=false (a refusal or bad input)."""

    def __init__(self, command: str, answer: JsonObject):
        self.answer = answer
        super().__init__(f"{command}: {answer.get('error') or answer.get('problems')}")


# The interpreter could not be executed (not found / not executable): retrying cannot help.
_CANNOT_RUN = (126, 127)


class AnswerLost(TransportError):
    """The agent started but its answer never came back: the connection dropped mid-command
    (ssh exits 255 with nothing on stderr when its master connection dies). The far side may
    have done the work; launch and stop reconcile when retried, so this is retried like any
    transport failure."""


class Agent:
    """Runs the far-side agent through a transport, with the host's environment."""

    def __init__(
        self, transport: Transport, *, path_prepend: str = "", env: dict[str, str] | None = None
    ):
        self.transport = transport
        self.path_prepend = path_prepend
        self.env = dict(env or {})
        # Fencing (see ``fence``): checked before and after every call; the controller id
        # goes with every call that names a run directory, for the agent's own check.
        self.guard: Callable[[], None] | None = None
        self.controller: int | None = None

    def fence(self, *, guard: Callable[[], None], controller: int) -> Agent:
        """Tie this agent to the job that drives a server: ``guard`` (the job's lease check)
        raises before any call once the job is lost, and the agent refuses calls from a
        controller lower than one it has seen for the run (a job that took over)."""
        self.guard = guard
        self.controller = controller
        return self

    @classmethod
    def for_host(cls, host: Host, container: Container | None) -> Agent:
        return cls(
            transport_for(host, container), path_prepend=host.path_prepend, env=host.command_env
        )

    def interpreter(self) -> list[str]:
        return self.wrap(["python3", "-"])

    def wrap(self, argv: list[str]) -> list[str]:
        """argv run with the host's PATH and environment (the agent, a telemetry stream)."""
        return with_host_env(argv, path_prepend=self.path_prepend, env=self.env)

    async def call(
        self,
        command: str,
        args: Mapping[str, object],
        *,
        timeout: float = 60.0,  # noqa: ASYNC109 - passed to the transport, which kills the process
        check: bool = True,
    ) -> dict[str, Any]:
        """Run one agent command. HopError/CommandTimeout from the transport propagate;
        AnswerLost when the agent started but no answer arrived; AgentFailed for a refusal
        (with ``check``) or an agent that could not run."""
        import json

        if self.guard is not None:
            self.guard()
        if self.controller is not None and "run_dir" in args:
            args = {**args, "controller": self.controller}
        result = await run_script(
            self.transport,
            AGENT_SOURCE,
            interpreter=self.interpreter(),
            args=[command, json.dumps(args, separators=(",", ":"), sort_keys=True)],
            timeout=timeout,
            check=False,
        )
        answer = result.value if isinstance(result.value, dict) else None
        lost = result.value is None and result.returncode not in _CANNOT_RUN
        if lost and not (result.error or "").startswith("unreadable"):
            detail = tail(result.stderr, 3) or "no error output"
            raise AnswerLost(
                f"{self.transport.describe()}: the agent started but its answer was lost "
                f"(exit {result.returncode}): {detail}"
            )
        if self.guard is not None:
            # An answer that arrives after the lease was lost is not acted on.
            self.guard()
        if answer is not None and answer.get("superseded"):
            from core.jobs import LeaseLost

            raise LeaseLost(f"{command}: {answer.get('error')}")
        if answer is None:
            raise AgentFailed(
                command, {"error": result.error or "no answer", "stderr": result.stderr[-2000:]}
            )
        if check and not answer.get("ok", False):
            raise AgentFailed(command, answer)
        return answer
