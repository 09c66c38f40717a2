"""The verdicts of a stop: what the agent's stop and verification (and the GPU probe's
reading) say, turned into an instance's final state (stopped, failed, crashed, dirty) with
its evidence. Synchronous and persisted, like ``hosts.lifecycle.steps``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, NotRequired, TypedDict, final

from hosts import services
from hosts.agent.parts.control import CountedHolder, GpuMemoryCheck, StopAnswer, VerifyAnswer
from hosts.agent.parts.ports import PortState
from hosts.agent.parts.procfs import Member
from hosts.instance_fields import InstanceFields
from hosts.lifecycle.steps import Plan, note
from hosts.models import InstanceState, ServerInstance
from hosts.telemetry.manager import GpuReading


@final  # no other keys: so that `"holders" in verify` tells an agent's answer from this
class VerifyFailed(TypedDict):
    """A verification that could not be asked for (the agent unreachable): why, only."""

    verdict: Literal["unknown"]
    reasons: list[str]


Verification = VerifyAnswer | VerifyFailed


class NoStopAnswer(TypedDict):
    """The stop's place in the evidence when the stop never answered: an empty object."""


class StopEvidence(TypedDict):
    """`ServerInstance.evidence` after a stop: what the verification and the stop said."""

    reasons: list[str]
    holders: list[CountedHolder]
    members: list[Member]
    gpu_memory: dict[str, GpuMemoryCheck] | str | None
    port: PortState | None
    stop: StopAnswer | NoStopAnswer
    gpu_memory_probe: NotRequired[GpuReading]
    not_checked: NotRequired[str]
    gpus_not_checked: NotRequired[list[int]]


def _evidence(stop: StopAnswer | None, verify: Verification) -> StopEvidence:
    if "holders" not in verify:  # the verification never ran: nothing was seen
        return {
            "reasons": verify.get("reasons", []),
            "holders": [],
            "members": [],
            "gpu_memory": None,
            "port": None,
            "stop": stop or {},
        }
    return {
        "reasons": verify.get("reasons", []),
        "holders": verify.get("holders", []),
        "members": verify.get("members", []),
        "gpu_memory": verify.get("gpu_memory"),
        "port": verify.get("port"),
        "stop": stop or {},
    }


GPU_TOLERANCE_MB = 512  # the agent's default tolerance too


def probe_gpu_problems(plan: Plan, reading: GpuReading | None) -> list[str]:
    """The telemetry probe's own reading after the stop, checked against the level before
    the start: both readers must agree that the instance's GPUs were released."""
    if not reading or not plan.baseline_gpu_memory:
        return []
    used = dict(zip(reading.get("index", []), reading.get("used", []), strict=False))
    problems = []
    for gpu in plan.gpu_ids:
        before = plan.baseline_gpu_memory.get(str(gpu))
        now = used.get(gpu)
        if before is not None and now is not None and now > before + GPU_TOLERANCE_MB:
            problems.append(
                f"GPU {gpu} holds {now} MiB, {now - before} MiB above its level before start "
                "(telemetry probe)"
            )
    return problems


def finish_stop(
    plan: Plan,
    *,
    reason: str,
    stop: StopAnswer,
    verify: VerifyAnswer,
    exit_code: int | None,
    failed: bool,
    probe_reading: GpuReading | None = None,
) -> str:
    probe_problems = probe_gpu_problems(plan, probe_reading)
    if probe_problems and verify.get("verdict") == "stopped":
        verify = {
            **verify,
            "verdict": "dirty",
            "reasons": [*verify.get("reasons", []), *probe_problems],
        }
    evidence = _evidence(stop, verify)
    if probe_reading is not None:
        evidence["gpu_memory_probe"] = probe_reading
    code = exit_code if exit_code is not None else stop.get("exit_code")
    if verify.get("verdict") == "stopped":
        state = InstanceState.FAILED if failed else InstanceState.STOPPED
        summary = _verified_summary(stop, verify)
        services.instance_transition(
            instance_id=plan.instance_id,
            state=state,
            message=f"{reason}. Verified: {summary}",
            exit_code=code,
            evidence=evidence,
            reason=reason if failed else "",
            log_tail=plan.last_log,
        )
        return str(state)
    why = _dirty_reasons(verify, probe_reading, plan.gpu_ids)
    mark_dirty(plan, f"{reason}; not clean: {why}", evidence, exit_code=code)
    return InstanceState.DIRTY


def _verified_summary(stop: StopAnswer, verify: VerifyAnswer) -> str:
    terminated, killed = len(stop.get("terminated", [])), len(stop.get("killed", []))
    memory = verify.get("gpu_memory")
    if not isinstance(memory, dict) or not memory:
        gpus = "GPU memory not read (no GPUs, or nvidia-smi unavailable)"
    elif all(m.get("ok") is True for m in memory.values()):
        gpus = "GPU memory back to its level before start"
    else:
        # A missing reading or level before the start is not a pass: say what was seen.
        seen = ", ".join(
            f"GPU {i}: {m.get('used_mb')} MiB now, {m.get('baseline_mb')} MiB before start"
            for i, m in sorted(memory.items())
        )
        gpus = f"GPU memory not compared where a reading is missing ({seen})"
    exited = len(stop.get("exited", []))
    by_themselves = f", {exited} ended by themselves" if exited else ""
    return f"terminated {terminated}, killed {killed}{by_themselves}; port closed; {gpus}"


def _dirty_reasons(verify: Verification, probe_reading: GpuReading | None, gpus: list[int]) -> str:
    """The verification's reasons, plus what nvidia-smi says when no process could be named:
    memory held with no fd holder is a process in another namespace, or the driver's own."""
    text = "; ".join(verify.get("reasons", []))
    memory = None  # and no holder when the verification never ran
    if "holders" in verify:
        if any(h.get("counts") for h in verify.get("holders", [])):
            return text
        memory = verify.get("gpu_memory")
    # GPU index -> what was read of its memory ("used_mb"), by the agent or else the probe.
    held: dict[str, Mapping[str, object]] = (
        {i: m for i, m in memory.items() if m.get("ok") is False}
        if isinstance(memory, dict)
        else {}
    )
    probe_found = any("(telemetry probe)" in r for r in verify.get("reasons", []))
    if not held and probe_reading and probe_found:
        used = dict(
            zip(probe_reading.get("index", []), probe_reading.get("used", []), strict=False)
        )
        held = {str(i): {"used_mb": used.get(i)} for i in gpus if i in used}
    if not held:
        return text
    seen = ", ".join(f"GPU {i}: {m.get('used_mb')} MiB used" for i, m in sorted(held.items()))
    return (
        f"{text}; no process holds the GPU device files (fd scan); nvidia-smi reports {seen} "
        "(a process outside this container's PID namespace, or memory the driver has not "
        "released yet)"
    )


def mark_dirty(
    plan: Plan, reason: str, evidence: StopEvidence | NoStopAnswer, exit_code: int | None = None
) -> None:
    instance = ServerInstance.objects.get(pk=plan.instance_id)
    if instance.state == InstanceState.CRASHED:
        services.instance_transition(
            instance_id=plan.instance_id,
            state=InstanceState.DIRTY,
            message=reason,
            reason=reason,
            evidence=evidence,
        )
        return
    if instance.state not in {InstanceState.STOPPING, InstanceState.DIRTY}:
        services.instance_transition(
            instance_id=plan.instance_id, state=InstanceState.STOPPING, message="Stopping"
        )
    fields: InstanceFields = {"reason": reason, "evidence": evidence, "stop_requested": False}
    if exit_code is not None:
        fields["exit_code"] = exit_code
    services.instance_transition(
        instance_id=plan.instance_id, state=InstanceState.DIRTY, message=reason, **fields
    )


@dataclass(frozen=True)
class CleanupClaims:
    """What other instances hold of an ended instance's port and GPUs at its clean-up."""

    came_from: str
    port_holder: str
    gpus: list[int]


def begin_cleanup(plan: Plan) -> CleanupClaims:
    came_from = plan.state
    holder, gpus = services.instance_begin_cleanup(
        instance_id=plan.instance_id,
        message=f"Clean-up stop of a {came_from} instance: its leftovers are stopped and verified",
    )
    if not holder:
        plan.state = InstanceState.STOPPING
    return CleanupClaims(came_from=came_from, port_holder=holder, gpus=gpus)


def finish_cleanup(
    plan: Plan, claims: CleanupClaims, *, stop: StopAnswer | None, verify: Verification
) -> str:
    """A failed or crashed instance stays failed or crashed (its reason is the story); a lost
    one whose leftovers are verified gone is stopped."""
    evidence = _evidence(stop, verify)
    if claims.port_holder:
        evidence["not_checked"] = f"port {plan.port} (held by {claims.port_holder})"
    if claims.gpus:
        evidence["gpus_not_checked"] = claims.gpus
    if verify.get("verdict") == "stopped" and "holders" in verify and stop is not None:
        final = (
            claims.came_from
            if claims.came_from in {InstanceState.FAILED, InstanceState.CRASHED}
            else InstanceState.STOPPED
        )
        fields: InstanceFields = {"evidence": evidence, "stop_requested": False}
        if final == InstanceState.STOPPED:
            fields["reason"] = ""
        services.instance_transition(
            instance_id=plan.instance_id,
            state=final,
            message=f"Clean-up stop verified: {_verified_summary(stop, verify)}",
            release_claims=True,
            **fields,
        )
        return str(final)
    why = f"Clean-up stop not clean: {_dirty_reasons(verify, None, plan.gpu_ids)}"
    if not claims.port_holder:
        mark_dirty(plan, why, evidence)
        return InstanceState.DIRTY
    # Dirty would hold a port that is someone else's now: it stays where it was, with the
    # evidence, and a later Stop can try again.
    instance = ServerInstance.objects.get(pk=plan.instance_id)
    services.instance_transition(
        instance_id=plan.instance_id,
        state=instance.state,
        message=why,
        reason=f"{instance.reason}; {why}" if instance.reason else why,
        evidence=evidence,
        stop_requested=False,
        release_claims=False,
    )
    return str(instance.state)


def finish_crash_cleanup(plan: Plan, *, stop: StopAnswer, verify: VerifyAnswer) -> None:
    evidence = _evidence(stop, verify)
    if verify.get("verdict") == "stopped":
        services.instance_release_claims(instance_id=plan.instance_id)
        ended = len(stop.get("killed", [])) + len(stop.get("terminated", []))
        note(plan, f"Clean-up after the crash: ended {ended} leftover process(es); GPUs free")
        ServerInstance.objects.filter(pk=plan.instance_id).update(evidence=evidence)
        return
    services.instance_transition(
        instance_id=plan.instance_id,
        state=InstanceState.DIRTY,
        message="Leftovers after the crash: " + "; ".join(verify.get("reasons", [])),
        evidence=evidence,
    )
