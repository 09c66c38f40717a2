"""Case 9: the ssh connection drops while a launch or a stop is on its way. The agent keeps
going on the far side (it ignores SIGHUP for mutating commands); the job retries, and the
retry reconciles with what the first attempt did instead of doing it twice."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from hosts.lifecycle import remote
from hosts.models import Host, InstanceState, ServerInstance
from hosts.transports.base import CommandResult, Hop, LineStream, Transport
from hosts.transports.ssh import SSHTransport
from tests.fixtures.procs import alive
from tests.hosts.lifecycle.conftest import (
    gpu_used_mb,
    marker_pids,
    request_stop,
    ssh_master_pids,
    start,
    wait_state,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.sshd]

Hook = Callable[[str, int], Awaitable[None]]


class Interposer(Transport):
    """The real chain, with a record of every agent command sent through it and hooks that
    run before or after a command reaches the far side (to drop the connection there)."""

    def __init__(self, inner: Transport, *, before: Hook | None = None, after: Hook | None = None):
        self.real = inner
        self.before = before
        self.after = after
        self.calls: list[tuple[str, str]] = []  # (agent command, "ok" | exception name)

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        stdin: bytes | None = None,
        check: bool = True,
    ) -> CommandResult:
        command = argv[-2] if len(argv) >= 2 else ""  # the agent's: ... python3 - CMD JSON
        attempt = 1 + sum(1 for name, _ in self.calls if name == command)
        try:
            if self.before is not None:
                await self.before(command, attempt)
            result = await self.real.run(argv, timeout=timeout, stdin=stdin, check=check)
            if self.after is not None:
                await self.after(command, attempt)
        except Exception as exc:
            self.calls.append((command, type(exc).__name__))
            raise
        self.calls.append(
            (command, "ok" if result.returncode == 0 else f"exit {result.returncode}")
        )
        return result

    def stream(
        self, argv: Sequence[str], *, stdin: bytes | None = None
    ) -> AbstractAsyncContextManager[LineStream]:
        return self.real.stream(argv, stdin=stdin)

    def command_line(self, argv: Sequence[str], *, stdin: bool = False) -> list[str]:
        return self.real.command_line(argv, stdin=stdin)

    def label(self) -> str:
        return self.real.label()

    def hops(self) -> list[Hop]:
        return self.real.hops()

    def attempts(self, command: str) -> list[str]:
        return [outcome for name, outcome in self.calls if name == command]


def ssh_hop(transport: Transport) -> SSHTransport:
    hop = transport.hops()[0]
    assert isinstance(hop, SSHTransport)
    return hop


def interpose(monkeypatch: pytest.MonkeyPatch, **hooks: Hook) -> list[Interposer]:
    made: list[Interposer] = []
    real = remote.transport_for

    def wrapped(host: Host, container: Any) -> Transport:
        made.append(Interposer(real(host, container), **hooks))
        return made[-1]

    monkeypatch.setattr(remote, "transport_for", wrapped)
    return made


def supervisors(run_id: str) -> list[int]:
    return [pid for pid in marker_pids(run_id) if "specdash-sup" in _comm(pid)]


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


async def test_a_launch_whose_answer_was_lost_is_retried_and_reattaches_to_the_same_server(
    sshd: Any,
    jobs: Any,
    sim_profile: Any,
    sim_state: Path,
    ssh_host: Any,
    ssh_control: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def drop_after_the_far_side_ran(command: str, attempt: int) -> None:
        # The launch happened over there; then the connection goes away before the answer
        # is read: the master dies, and ssh fails as it does on a lost connection.
        if command in {"launch", "stop"} and attempt == 1:
            for pid in ssh_master_pids(ssh_control):
                os.kill(pid, signal.SIGKILL)
            raise ssh_hop(made[0].real).hop_error("connection lost (server not responding)")

    made = interpose(monkeypatch, after=drop_after_the_far_side_ran)
    host = await sync_to_async(ssh_host)(sshd)
    profile = await sync_to_async(sim_profile)("--load-seconds", "1", host=host)
    before = gpu_used_mb(sim_state)

    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=90)
    assert ready.state == InstanceState.READY, ready.reason
    transport = made[0]
    assert transport.attempts("launch") == ["HopError", "ok"]
    messages = [e.message async for e in ready.events.all()]
    assert "Re-attached to the server already running for this run id" in messages
    assert len(supervisors(ready.run_id)) == 1  # one launch, not two
    assert ready.pid and alive(ready.pid)

    await request_stop(ready)
    assert (await asyncio.wait_for(owner, 90))["outcome"] == "stopped"
    assert transport.attempts("stop") == ["HopError", "ok"]
    stopped = await ServerInstance.objects.aget(pk=instance.pk)
    assert stopped.state == InstanceState.STOPPED, (stopped.reason, stopped.evidence)
    assert not alive(ready.pid)
    assert marker_pids(ready.run_id) == []
    assert gpu_used_mb(sim_state) == before


async def test_a_stop_cut_by_a_dying_ssh_master_is_retried_and_completes(
    sshd: Any,
    jobs: Any,
    sim_profile: Any,
    sim_state: Path,
    ssh_host: Any,
    ssh_control: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Workers that ignore SIGTERM keep the far-side stop busy for the whole grace period,
    # which leaves time to kill the ssh master connection while the stop is running.
    monkeypatch.setattr(settings, "SPECDASH_STOP_GRACE_S", 4)  # the profiles' default
    made = interpose(monkeypatch)
    host = await sync_to_async(ssh_host)(sshd)
    profile = await sync_to_async(sim_profile)("--fault-ignore-sigterm", host=host)
    before = gpu_used_mb(sim_state)
    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=90)
    assert ready.state == InstanceState.READY, ready.reason

    await request_stop(ready)
    await _far_side_agent("stop", ready.run_id)
    masters = ssh_master_pids(ssh_control)
    assert masters, "the stop should run over a master connection"
    for pid in masters:
        os.kill(pid, signal.SIGKILL)

    assert (await asyncio.wait_for(owner, 90))["outcome"] == "stopped"
    # ssh exited 255 mid-stop with no answer (AnswerLost), and the retry answered.
    assert made[0].attempts("stop") == ["exit 255", "ok"]
    stopped = await ServerInstance.objects.aget(pk=instance.pk)
    assert stopped.state == InstanceState.STOPPED, (stopped.reason, stopped.evidence)
    notes = [e.message async for e in stopped.events.all()]
    assert not any("could not be completed" in n for n in notes)
    assert marker_pids(ready.run_id) == []
    assert gpu_used_mb(sim_state) == before


def _agent_pid(command: str, run_id: str) -> int | None:
    """The pid of the agent running ``command`` for ``run_id`` (``python3 - stop {...}``)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"-" in argv and command.encode() in argv and run_id.encode() in argv[-2]:
            return int(entry)
    return None


async def _far_side_agent(command: str, run_id: str, timeout: float = 30) -> int:
    async with asyncio.timeout(timeout):
        while (pid := _agent_pid(command, run_id)) is None:
            await asyncio.sleep(0.05)
    return pid


async def test_a_preflight_cut_by_a_dropped_connection_is_retried_and_the_start_goes_on(
    sshd: Any,
    jobs: Any,
    sim_profile: Any,
    ssh_host: Any,
    ssh_control: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def drop_before_the_first_preflight(command: str, attempt: int) -> None:
        if command == "preflight" and attempt == 1:
            for pid in ssh_master_pids(ssh_control):
                os.kill(pid, signal.SIGKILL)
            raise ssh_hop(made[0].real).hop_error("connection lost (server not responding)")

    made = interpose(monkeypatch, before=drop_before_the_first_preflight)
    host = await sync_to_async(ssh_host)(sshd)
    profile = await sync_to_async(sim_profile)(host=host)
    instance = await start(profile)
    owner = asyncio.create_task(jobs.run_next(instance.pk))
    ready = await wait_state(instance.pk, InstanceState.READY, InstanceState.FAILED, timeout=90)
    assert ready.state == InstanceState.READY, ready.reason
    assert made[0].attempts("preflight") == ["HopError", "ok"]
    await request_stop(ready)
    assert (await asyncio.wait_for(owner, 90))["outcome"] == "stopped"
