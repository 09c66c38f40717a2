"""The server lifecycle as background jobs.

``server.run`` owns an instance from launch to stop: preflight, detached launch, readiness,
then a watch loop that notices a crash within one poll and performs the stop when one is
requested. ``server.stop`` and ``server.kill_holders`` act on instances that no running job
owns (dirty, crashed, lost). An interrupted ``server.run`` (its worker died or the dashboard
restarted) is followed by an adopting ``server.run``, which re-attaches to a live server or
marks it lost. All database work goes through the lifecycle's async face
(``hosts.lifecycle.store``); far-side work goes through the agent over the host's transport.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TypedDict, cast

import httpx
from django.conf import settings

from core.jobs import JobContext, job_enqueue, job_handler, on_cancel_forced, on_interrupted
from core.jobs.registry import JobParams
from hosts import presets
from hosts.agent.parts.control import MembersAnswer, StatusAnswer
from hosts.agent.parts.files import LogTail
from hosts.agent.parts.launch import LaunchAnswer, LaunchFailure, PreflightAnswer
from hosts.lifecycle import steps, store
from hosts.lifecycle.readiness import (
    ReadinessResult,
    check_ready,
    fetch_server_info,
    is_healthy,
)
from hosts.lifecycle.remote import Agent, AgentFailed
from hosts.lifecycle.stopping import (
    agent_launch,
    agent_status,
    call_with_retries,
    cleanup_after_crash,
    cleanup_stop,
    connection_problem,
    stop_and_verify,
)
from hosts.models import InstanceState
from hosts.telemetry import manager as telemetry
from hosts.transports.base import TransportError

logger = logging.getLogger(__name__)


class ServerOutcome(TypedDict):
    """A server job's result (``server.run``, ``server.stop``, ``server.kill_holders``): the
    state its instance ended in, as the job left it."""

    outcome: str


class _LogUnread(TypedDict):
    """The run directory's log when the agent could not be asked for it."""

    exists: None
    error: str


def _fenced_agent(ctx: JobContext, plan: steps.Plan) -> Agent:
    """The agent of a job that drives a server: it stops at once when the job's lease is lost,
    and the agent itself refuses a job that was taken over (a higher job id controls)."""
    return Agent.for_host(plan.host, plan.container).fence(
        guard=ctx.check_lease, controller=ctx.job_id
    )


@job_handler("server.run")
async def run_server(ctx: JobContext) -> ServerOutcome:
    plan = await store.aload_plan(ctx.params["instance_id"])
    agent = _fenced_agent(ctx, plan)
    await telemetry.ensure_for_host(plan.host.pk)
    # No keep-alive: a pooled connection left open to a server that then dies leaves a
    # closing socket on its port, which the stop verification would rightly see as bound.
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, connect=2.0), limits=limits) as client:
        if ctx.params.get("adopt"):
            return await _adopt(ctx, plan, agent, client)
        try:
            # Read-only, so a dropped connection is simply asked again, like launch and stop.
            answer = await call_with_retries(
                agent,
                "preflight",
                plan.preflight_args(),
                timeout=60,
                check=False,
                retry=connection_problem,
            )
            # The shape the agent's preflight declares (checked there, where it is built).
            preflight = cast(PreflightAnswer, answer)
        except TransportError as exc:
            # The error names the hop that failed: the ssh connection or the container.
            await store.afail(plan, f"Could not run the preflight: {exc}")
            return {"outcome": "failed"}
        if not preflight.get("ok"):
            problems = "; ".join(preflight.get("problems", [])) or str(preflight.get("error"))
            await store.afail(
                plan, f"Preflight refused the start: {problems}", evidence={"preflight": preflight}
            )
            return {"outcome": "failed"}
        baseline = steps.baseline_from_preflight(preflight, plan.gpu_ids)
        await store.arecord_baseline(plan, baseline)
        try:
            launch = await agent_launch(agent, plan)
        except AgentFailed as exc:
            # The supervisor recorded why (127: the argv could not be executed) and the log;
            # the shape the agent's launch declares for a failure (an answer that never came
            # has only its error).
            failure = cast(LaunchFailure, exc.answer)
            code = failure.get("exit_code")
            await store.afail(
                plan,
                f"Launch failed ({steps.exit_phrase(code)}): {failure.get('error')}",
                {"launch": exc.answer},
                exit_code=code,
                log_tail="\n".join(failure.get("log_tail") or []),
            )
            return {"outcome": "failed"}
        except TransportError as exc:
            await store.afail(plan, f"Launch failed: {exc}")
            return {"outcome": "failed"}
        plan = await store.arecord_launch(plan, launch, baseline)
        outcome = await _wait_until_ready(ctx, plan, agent, client)
        if outcome != "ready":
            return {"outcome": outcome}
        return await _watch(ctx, plan, agent, client)


async def _wait_until_ready(
    ctx: JobContext, plan: steps.Plan, agent: Agent, client: httpx.AsyncClient
) -> str:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + plan.readiness_timeout_s
    next_status = 0.0
    last_stage = ""
    while True:
        if ctx.cancelled.is_set() or await store.astop_requested(plan.instance_id):
            return await stop_and_verify(plan, agent, reason="Stop requested while loading")
        # One probe never runs past the readiness budget (its HTTP timeout alone is 10 s).
        remaining = max(deadline - loop.time(), 0.05)
        try:
            result = await asyncio.wait_for(check_ready(client, plan.readiness), remaining)
        except TimeoutError:
            result = ReadinessResult(
                False, last_stage or "connect", f"no answer within {remaining:.1f} s"
            )
        if result.ready:
            info = await fetch_server_info(client, plan.readiness.base_url)
            await store.amark_ready(plan, info)
            return "ready"
        if result.stage != last_stage:
            last_stage = result.stage
            await store.areadiness_progress(plan, result.stage, result.detail)
        if loop.time() >= next_status:
            next_status = loop.time() + settings.SPECDASH_STATUS_INTERVAL_S
            try:
                status = await agent_status(agent, plan)
            except (TransportError, AgentFailed) as exc:
                await store.anote(plan, f"Status check failed: {exc}")
                status = None
            if status is not None:
                await store.aupdate_log(plan, status)
                if not status.get("alive"):
                    code = status.get("exit_code")
                    return await stop_and_verify(
                        plan,
                        agent,
                        reason=steps.exited_before_ready(code) + _bind_hint(plan),
                        exit_code=code,
                        failed=True,
                    )
        if loop.time() >= deadline:
            return await stop_and_verify(
                plan,
                agent,
                reason=f"Not ready after {plan.readiness_timeout_s:g} s "
                f"(last check: {result.stage} {result.detail})" + _bind_hint(plan),
                failed=True,
            )
        await asyncio.sleep(settings.SPECDASH_READY_POLL_S)


def _bind_hint(plan: steps.Plan) -> str:
    connect_to = httpx.URL(plan.readiness.base_url).host
    return presets.bind_hint(plan.argv, connect_to, plan.last_log)


async def _watch(
    ctx: JobContext, plan: steps.Plan, agent: Agent, client: httpx.AsyncClient
) -> ServerOutcome:
    """While ready: a crash is seen within one poll; a stop request ends the watch."""
    unreachable_since: float | None = None
    loop = asyncio.get_running_loop()
    while True:
        if ctx.cancelled.is_set() or await store.astop_requested(plan.instance_id):
            return {"outcome": await stop_and_verify(plan, agent, reason="Stop requested")}
        try:
            status = await agent_status(agent, plan)
            unreachable_since = None
        except (TransportError, AgentFailed) as exc:
            unreachable_since = unreachable_since or loop.time()
            await store.anote(plan, f"Host unreachable: {exc}", once=True)
            if loop.time() - unreachable_since > settings.SPECDASH_LOST_AFTER_S:
                await store.amark_lost(
                    plan, f"Host unreachable for {settings.SPECDASH_LOST_AFTER_S:.0f} s: {exc}"
                )
                return {"outcome": "lost"}
            await asyncio.sleep(settings.SPECDASH_WATCH_INTERVAL_S)
            continue
        await store.aupdate_log(plan, status)
        if not status.get("alive"):
            code = status.get("exit_code")
            await store.amark_crashed(plan, code, status)
            await cleanup_after_crash(plan, agent)
            return {"outcome": "crashed"}
        if not await is_healthy(client, plan.readiness):
            await store.anote(plan, "Health check failing while the process is alive", once=True)
        await asyncio.sleep(settings.SPECDASH_WATCH_INTERVAL_S)


async def _adopt(
    ctx: JobContext, plan: steps.Plan, agent: Agent, client: httpx.AsyncClient
) -> ServerOutcome:
    """Re-attach to an instance whose owning job was interrupted, or mark it lost."""
    if plan.pid is None:
        return await _adopt_unrecorded_launch(ctx, plan, agent, client)
    try:
        status = await agent_status(agent, plan, retried=True)
    except (TransportError, AgentFailed) as exc:
        await store.amark_lost(plan, f"Could not check the server after a restart: {exc}")
        return {"outcome": "lost"}
    if not status.get("alive"):
        leftovers = [m for m in status.get("members") or [] if m.get("state") != "Z"]
        if leftovers:
            # Its workers outlived it (and may hold GPU memory): clean up by marker, verify.
            return {"outcome": await _clean_up_leftovers(plan, agent, status, len(leftovers))}
        await store.amark_lost(
            plan,
            f"Server gone after a dashboard restart ({steps.exit_phrase(status.get('exit_code'))})",
            evidence={"status": status},
        )
        return {"outcome": "lost"}
    await store.anote(plan, "Re-adopted after a dashboard restart")
    if plan.state in {InstanceState.LOADING, InstanceState.STARTING}:
        outcome = await _wait_until_ready(ctx, plan, agent, client)
        if outcome != "ready":
            return {"outcome": outcome}
    elif plan.state == InstanceState.STOPPING:
        return {
            "outcome": await stop_and_verify(
                plan, agent, reason="Stop resumed after a dashboard restart"
            )
        }
    elif not await is_healthy(client, plan.readiness):
        await store.anote(plan, "Adopted, but its health check does not answer yet")
    return await _watch(ctx, plan, agent, client)


async def _clean_up_leftovers(
    plan: steps.Plan, agent: Agent, status: StatusAnswer, count: int
) -> str:
    """The server died while nobody watched, leaving processes of its own behind."""
    code = status.get("exit_code")
    why = (
        f"Server died while the dashboard was down ({steps.exit_phrase(code)}); "
        f"{count} leftover process(es)"
    )
    if plan.state == InstanceState.READY:
        await store.amark_crashed(plan, code, status)
        await cleanup_after_crash(plan, agent)
        return await store.ainstance_state(plan.instance_id)
    failed = plan.state in {InstanceState.STARTING, InstanceState.LOADING}
    return await stop_and_verify(plan, agent, reason=why, exit_code=code, failed=failed)


async def _adopt_unrecorded_launch(
    ctx: JobContext, plan: steps.Plan, agent: Agent, client: httpx.AsyncClient
) -> ServerOutcome:
    """The owner went away before it recorded a launch, but the agent carries on when the
    dashboard dies: the server may be running with nobody knowing its pid. Its processes
    carry the marker, so ask for them before declaring anything."""
    try:
        answer = await call_with_retries(agent, "members", {"run_id": plan.run_id}, timeout=30)
        found = cast(MembersAnswer, answer)  # the shape the agent's members declares
    except (TransportError, AgentFailed) as exc:
        await store.amark_lost(
            plan, f"Could not look for the server after a dashboard restart: {exc}"
        )
        return {"outcome": "lost"}
    live = [m for m in found.get("members") or [] if m.get("state") not in ("Z", "X")]
    if not live:
        log = await _run_dir_log(agent, plan)
        launched = bool(log.get("exists"))
        reason = (
            "The server launched while the dashboard restarted has exited; no process of this "
            "run is left (marker scan)"
            if launched
            else "The dashboard restarted before the server was launched: no process carries "
            "its marker and its run directory has no log"
        )
        await store.amark_lost(plan, reason, evidence={"members": found, "log": log})
        return {"outcome": "lost"}
    await store.anote(
        plan,
        f"Found {len(live)} process(es) of this run by marker after a dashboard restart "
        "(launched while the dashboard was down)",
    )
    if plan.state == InstanceState.STOPPING:  # a clean-up of these was already under way
        why = "Stop resumed after a dashboard restart (processes found by marker)"
        return {"outcome": await stop_and_verify(plan, agent, reason=why, failed=True)}
    launch: LaunchAnswer | None = None
    refusal: AgentFailed | None = None
    # The repeated launch of the same run id re-attaches (the supervisor's server.json);
    # the supervisor may be a moment from writing it, hence the second try.
    for _ in range(2):
        try:
            launch = await agent_launch(agent, plan)
            break
        except AgentFailed as exc:
            refusal = exc
            await asyncio.sleep(1.0)
        except TransportError as exc:
            await store.amark_dirty(
                plan, f"Found the run's processes after a restart, then lost the host: {exc}", {}
            )
            return {"outcome": "dirty"}
    if launch is None:
        # Processes of the run but no server (it died, its workers live on): stop, verify.
        why = (
            f"The dashboard restarted during the launch; {len(live)} process(es) of the run "
            f"were left without a server ({refusal})"
        )
        return {"outcome": await stop_and_verify(plan, agent, reason=why, failed=True)}
    plan = await store.arecord_launch(plan, launch, plan.baseline_gpu_memory)
    outcome = await _wait_until_ready(ctx, plan, agent, client)
    if outcome != "ready":
        return {"outcome": outcome}
    return await _watch(ctx, plan, agent, client)


async def _run_dir_log(agent: Agent, plan: steps.Plan) -> LogTail | _LogUnread:
    try:
        answer = await agent.call("log_tail", {"run_dir": plan.run_dir, "lines": 20}, timeout=30)
        return cast(LogTail, answer)
    except (TransportError, AgentFailed) as exc:
        return {"exists": None, "error": str(exc)}


@on_interrupted("server.run")
def _reattach_later(job_id: int, params: JobParams) -> None:
    steps.enqueue_adoption(params["instance_id"])


@on_cancel_forced("server.run")
def _stop_after_forced_cancel(job_id: int, params: JobParams) -> None:
    """A cancelled owner that did not stop within the grace leaves a server nobody drives:
    a ``server.stop`` (targeted stop, then verification) takes it over. Idempotent: nothing
    is queued when a job for the instance is already queued or running."""
    from core.models import Job, JobState
    from hosts.services import instance_lock_key

    instance_id = int(params["instance_id"])
    lock = instance_lock_key(instance_id)
    if Job.objects.filter(lock_key=lock, state__in=[JobState.QUEUED, JobState.RUNNING]).exists():
        return
    job_enqueue(
        kind="server.stop",
        params={"instance_id": instance_id, "reason": "Its job was cancelled and did not stop "
                "within the grace; forced, then stopped and verified"},
        lock_key=lock,
    )  # fmt: skip


@job_handler("server.stop")
async def stop_server(ctx: JobContext) -> ServerOutcome:
    plan = await store.aload_plan(ctx.params["instance_id"])
    agent = _fenced_agent(ctx, plan)
    if plan.state in steps.CLEANUP_STATES:
        return {"outcome": await cleanup_stop(plan, agent)}
    reason = str(ctx.params.get("reason") or "Stop requested")
    return {"outcome": await stop_and_verify(plan, agent, reason=reason)}


@job_handler("server.kill_holders")
async def kill_holders(ctx: JobContext) -> ServerOutcome:
    plan = await store.aload_plan(ctx.params["instance_id"])
    agent = _fenced_agent(ctx, plan)
    try:
        killed = await agent.call(
            "kill_pids",
            {"pids": ctx.params["holders"], "signal": "KILL", "wait_seconds": 5},
            timeout=60,
        )
    except (TransportError, AgentFailed) as exc:
        await store.anote(plan, f"Kill of listed holders failed: {exc}")
        return {"outcome": "dirty"}
    await store.anote(plan, f"Signalled {killed.get('signalled')}, skipped {killed.get('skipped')}")
    return {
        "outcome": await stop_and_verify(
            plan, agent, reason="Re-verified after killing the listed GPU holders"
        )
    }
