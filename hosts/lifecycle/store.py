"""The lifecycle jobs' async face onto the database: an ``async`` twin of each persisted step
(``hosts.lifecycle.steps``, ``hosts.lifecycle.verdicts``) the jobs call, in the manner of
contrib.sessions' ``load`` / ``aload``.

This module is the one place the lifecycle wraps synchronous code with ``sync_to_async``, so
the jobs (``jobs.py``, ``stopping.py``) read as plain ``await store.x(...)`` and never touch
the ORM. Each twin calls its sync step by attribute at call time rather than binding it once,
so the step stays the single definition (and can be patched in one place).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async

from hosts import services
from hosts.lifecycle import steps, verdicts
from hosts.lifecycle.steps import Plan
from hosts.lifecycle.verdicts import CleanupClaims
from hosts.models import ServerInstance


async def aload_plan(instance_id: int) -> Plan:
    return await sync_to_async(steps.load_plan)(instance_id)


async def astop_requested(instance_id: int) -> bool:
    return await sync_to_async(steps.stop_requested)(instance_id)


async def ainstance_state(instance_id: int) -> str:
    """The instance's state as stored now (a verdict may have moved it since the plan)."""
    state = await ServerInstance.objects.values_list("state", flat=True).aget(pk=instance_id)
    return str(state)


async def ainstance_stop(*, instance: ServerInstance) -> ServerInstance:
    """``hosts.services.instance_stop`` for a job that waits on another's server (an
    experiment stopping the server of its last step)."""
    return await sync_to_async(services.instance_stop)(instance=instance)


async def arecord_baseline(plan: Plan, baseline: dict[str, int]) -> None:
    await sync_to_async(steps.record_baseline)(plan, baseline)


async def arecord_launch(plan: Plan, launch: dict[str, Any], baseline: dict[str, int]) -> Plan:
    return await sync_to_async(steps.record_launch)(plan, launch, baseline)


async def areadiness_progress(plan: Plan, stage: str, detail: str) -> None:
    await sync_to_async(steps.readiness_progress)(plan, stage, detail)


async def amark_ready(plan: Plan, server_info: dict[str, Any]) -> None:
    await sync_to_async(steps.mark_ready)(plan, server_info)


async def anote(plan: Plan, message: str, *, once: bool = False) -> None:
    await sync_to_async(steps.note)(plan, message, once=once)


async def aupdate_log(plan: Plan, status: dict[str, Any]) -> None:
    await sync_to_async(steps.update_log)(plan, status)


async def amark_stopping(plan: Plan, reason: str) -> None:
    await sync_to_async(steps.mark_stopping)(plan, reason)


async def amark_crashed(plan: Plan, exit_code: int | None, status: dict[str, Any]) -> None:
    await sync_to_async(steps.mark_crashed)(plan, exit_code, status)


async def amark_lost(plan: Plan, reason: str, evidence: dict[str, Any] | None = None) -> None:
    await sync_to_async(steps.mark_lost)(plan, reason, evidence)


async def afail(
    plan: Plan, reason: str, evidence: dict[str, Any] | None = None, **fields: Any
) -> None:
    await sync_to_async(steps.fail)(plan, reason, evidence, **fields)


async def amark_dirty(
    plan: Plan, reason: str, evidence: dict[str, Any], exit_code: int | None = None
) -> None:
    await sync_to_async(verdicts.mark_dirty)(plan, reason, evidence, exit_code)


async def afinish_stop(
    plan: Plan,
    *,
    reason: str,
    stop: dict[str, Any],
    verify: dict[str, Any],
    exit_code: int | None,
    failed: bool,
    probe_reading: dict[str, Any] | None = None,
) -> str:
    return await sync_to_async(verdicts.finish_stop)(
        plan,
        reason=reason,
        stop=stop,
        verify=verify,
        exit_code=exit_code,
        failed=failed,
        probe_reading=probe_reading,
    )


async def afinish_crash_cleanup(
    plan: Plan, *, stop: dict[str, Any], verify: dict[str, Any]
) -> None:
    await sync_to_async(verdicts.finish_crash_cleanup)(plan, stop=stop, verify=verify)


async def abegin_cleanup(plan: Plan) -> CleanupClaims:
    return await sync_to_async(verdicts.begin_cleanup)(plan)


async def afinish_cleanup(
    plan: Plan, claims: CleanupClaims, *, stop: dict[str, Any], verify: dict[str, Any]
) -> str:
    return await sync_to_async(verdicts.finish_cleanup)(plan, claims, stop=stop, verify=verify)
