"""Stopping a server and verifying it is gone, and the agent calls that retry a dropped
connection: shared by the lifecycle jobs (``hosts.lifecycle.jobs``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import cast

from benchlib.json_types import JsonObject
from hosts.agent.parts.control import StatusAnswer, StopAnswer, VerifyAnswer
from hosts.agent.parts.launch import LaunchAnswer
from hosts.lifecycle import steps, store
from hosts.lifecycle.remote import Agent, AgentFailed
from hosts.telemetry import manager as telemetry
from hosts.transports.base import HopError, TransportError

# A launch or stop call that fails on the way (SSH drop) is retried: the agent reconciles a
# repeated launch of the same run id instead of starting a second server.
REMOTE_RETRIES = 3


async def call_with_retries(
    agent: Agent,
    command: str,
    args: Mapping[str, object],
    *,
    timeout: float,  # noqa: ASYNC109 - passed to the transport, which kills the process
    check: bool = True,
    retry: Callable[[TransportError], bool] = lambda exc: True,
) -> JsonObject:
    """The agent's answer as parsed: each caller casts it to the shape its command declares."""
    last: Exception | None = None
    for attempt in range(REMOTE_RETRIES):
        try:
            return await agent.call(command, args, timeout=timeout, check=check)
        except TransportError as exc:
            if not retry(exc):
                raise
            last = exc
            await asyncio.sleep(0.5 * (attempt + 1))
    assert last is not None
    raise last


async def agent_launch(agent: Agent, plan: steps.Plan) -> LaunchAnswer:
    """Launch the run (a repeat of the same run id re-attaches); a refusal or a server that
    could not start raises AgentFailed. Shape declared by the agent's launch command."""
    answer = await call_with_retries(agent, "launch", plan.launch_args(), timeout=60)
    return cast(LaunchAnswer, answer)


async def agent_status(agent: Agent, plan: steps.Plan, *, retried: bool = False) -> StatusAnswer:
    """The run's status (shape declared by the agent's status command); ``retried``: a
    dropped connection is asked again, as for launch and stop."""
    if retried:
        answer = await call_with_retries(agent, "status", plan.status_args(), timeout=30)
    else:
        answer = await agent.call("status", plan.status_args(), timeout=30)
    return cast(StatusAnswer, answer)


async def agent_stop(agent: Agent, plan: steps.Plan) -> StopAnswer:
    """The run's targeted stop. The answer's shape is the one the agent's stop command
    declares (it is checked there, where it is built)."""
    answer = await call_with_retries(agent, "stop", plan.stop_args(), timeout=plan.grace_s + 60)
    return cast(StopAnswer, answer)


async def agent_verify(agent: Agent, args: steps.VerifyArgs) -> VerifyAnswer:
    """The verification that the run is gone (shape declared by the agent's verify)."""
    return cast(VerifyAnswer, await call_with_retries(agent, "verify", args, timeout=60))


def connection_problem(exc: TransportError) -> bool:
    """Worth asking again: the connection failed or dropped. A container hop that answered
    (missing, not running) will answer the same."""
    return not (isinstance(exc, HopError) and exc.hop_index > 1)


async def stop_and_verify(
    plan: steps.Plan,
    agent: Agent,
    *,
    reason: str,
    exit_code: int | None = None,
    failed: bool = False,
) -> str:
    """Targeted stop then verification; the final state is stopped/failed or dirty."""
    await store.amark_stopping(plan, reason)
    # The GPU series around the stop, read by the telemetry probe's own argv and parser.
    await telemetry.gpu_record_now(agent=agent, host_id=plan.host.pk, instance_id=plan.instance_id)
    try:
        stop = await agent_stop(agent, plan)
        verify = await agent_verify(agent, plan.verify_args())
    except (TransportError, AgentFailed) as exc:
        await store.amark_dirty(plan, f"{reason}; the stop could not be completed: {exc}", {})
        return "dirty"
    # The probe's reading after the verification is part of the verdict, not just the chart.
    reading = await telemetry.gpu_record_now(
        agent=agent, host_id=plan.host.pk, instance_id=plan.instance_id
    )
    return await store.afinish_stop(
        plan,
        reason=reason,
        stop=stop,
        verify=verify,
        exit_code=exit_code,
        failed=failed,
        probe_reading=reading,
    )


async def cleanup_after_crash(plan: steps.Plan, agent: Agent) -> None:
    try:
        stop = await agent_stop(agent, plan)
        verify = await agent_verify(agent, plan.verify_args())
    except (TransportError, AgentFailed) as exc:
        await store.amark_dirty(plan, f"Crashed; clean-up failed: {exc}", {})
        return
    await store.afinish_crash_cleanup(plan, stop=stop, verify=verify)


async def cleanup_stop(plan: steps.Plan, agent: Agent) -> str:
    """A verified stop of an instance that already ended (failed, crashed, lost) and may
    have left processes behind. Its port and GPUs may belong to another instance by now:
    those are left out of the verification rather than taken back."""
    others = await store.abegin_cleanup(plan)
    verify_args = plan.verify_args()
    if others.port_holder:
        verify_args["port"] = None
    verify_args["gpus"] = [g for g in plan.gpu_ids if g not in others.gpus]
    try:
        stop = await agent_stop(agent, plan)
        verify = await agent_verify(agent, verify_args)
    except (TransportError, AgentFailed) as exc:
        return await store.afinish_cleanup(
            plan, others, stop=None, verify={"verdict": "unknown", "reasons": [str(exc)]}
        )
    return await store.afinish_cleanup(plan, others, stop=stop, verify=verify)
