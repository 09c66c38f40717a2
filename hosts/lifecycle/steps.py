"""Synchronous, persisted steps of the lifecycle jobs (called through ``sync_to_async``).

Every step writes its outcome to the database before the job moves on, so a refresh, a
second viewer or a restarted dashboard sees the truth.
"""

from __future__ import annotations

import shlex
import signal
from dataclasses import dataclass, field, replace
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

from hosts import services
from hosts.lifecycle.readiness import ReadinessTarget
from hosts.models import (
    Container,
    Host,
    InstanceEvent,
    InstanceState,
    Job,
    JobState,
    ServerInstance,
)
from hosts.models.instances import ACTIVE_STATES
from specdash import realtime

LOG_LINES = 60
# Ended instances a Stop cleans up after (with a verified stop of whatever is left).
CLEANUP_STATES = frozenset({InstanceState.FAILED, InstanceState.CRASHED, InstanceState.LOST})


@dataclass
class Plan:
    """Plain data for one instance, loaded once: async code never touches the ORM."""

    instance_id: int
    state: str
    run_id: str
    host: Host
    container: Container | None
    argv: list[str]
    env: dict[str, str]
    workdir: str
    port: int
    gpu_ids: list[int]
    run_dir: str
    readiness: ReadinessTarget
    readiness_timeout_s: float
    grace_s: float
    pid: int | None = None
    pgid: int | None = None
    sid: int | None = None
    start_time: int | None = None
    supervisor_pid: int | None = None
    baseline_gpu_memory: dict[str, int] = field(default_factory=dict)
    last_log: str = ""
    notes_sent: set[str] = field(default_factory=set)

    def identity(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "pid": self.pid,
            "pgid": self.pgid,
            "sid": self.sid,
            "start_time": self.start_time,
        }

    def device_dirs(self) -> list[str]:
        # A simulated host's GPUs are device files in the simulator's state directory; only
        # those (and the real /dev) count, never another simulator's on the same machine.
        dirs = ["/dev"]
        state_dir = self.host.command_env.get("SPECDASH_SIM_STATE_DIR")
        if state_dir:
            dirs.append(state_dir.rstrip("/") + "/dev")
        return dirs

    def preflight_args(self) -> dict[str, Any]:
        return {
            "port": self.port,
            "gpus": self.gpu_ids,
            "binary": self.argv[0],
            "workdir": self.workdir or None,
            "device_dirs": self.device_dirs(),
        }

    def launch_args(self) -> dict[str, Any]:
        env = dict(self.env)
        if self.gpu_ids and "CUDA_VISIBLE_DEVICES" not in env:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in self.gpu_ids)
        return {
            "run_id": self.run_id,
            "argv": self.argv,
            "env": env,
            "workdir": self.workdir or None,
            "run_dir": self.run_dir,
            "port": self.port,
        }

    def status_args(self) -> dict[str, Any]:
        return {
            **self.identity(),
            "run_dir": self.run_dir,
            "port": self.port,
            "log_lines": LOG_LINES,
        }

    def stop_args(self) -> dict[str, Any]:
        return {
            **self.identity(),
            "supervisor_pid": self.supervisor_pid,
            "run_dir": self.run_dir,
            "grace_seconds": self.grace_s,
            "kill_wait_seconds": 5,
        }

    def verify_args(self) -> dict[str, Any]:
        return {
            **self.identity(),
            "port": self.port,
            "gpus": self.gpu_ids,
            "baseline_gpu_mem_mb": self.baseline_gpu_memory,
            "device_dirs": self.device_dirs(),
        }


def load_plan(instance_id: int) -> Plan:
    instance = ServerInstance.objects.select_related("profile", "host", "profile__container").get(
        pk=instance_id
    )
    profile = instance.profile
    run_dir = instance.run_dir or f"{settings.SPECDASH_RUN_ROOT.rstrip('/')}/{instance.run_id}"
    return Plan(
        instance_id=instance.pk,
        state=instance.state,
        run_id=instance.run_id,
        host=instance.host,
        container=profile.container,
        argv=list(instance.launch_argv),
        env=dict(instance.env),
        workdir=profile.workdir,
        port=instance.port,
        gpu_ids=list(instance.gpu_ids),
        run_dir=run_dir,
        readiness=ReadinessTarget(
            base_url=instance.base_url,
            health_path=profile.readiness_path,
            expected_status=profile.readiness_status,
            openai_base_path=profile.openai_base_path,
            model=profile.served_model_name,
        ),
        readiness_timeout_s=float(profile.readiness_timeout_s),
        grace_s=float(profile.stop_grace_s),
        pid=instance.pid,
        pgid=instance.pgid,
        sid=instance.sid,
        start_time=instance.proc_start_time,
        supervisor_pid=instance.supervisor_pid,
        baseline_gpu_memory={str(k): int(v) for k, v in instance.baseline_gpu_memory.items()},
        last_log=instance.log_tail,
    )


def exit_phrase(code: int | None) -> str:
    """How an exit status reads in a reason: the supervisor records -N for signal N."""
    if code is None:
        return "no exit code recorded"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name} (exit code {code})"
    if code in (126, 127):
        return f"exit code {code}: the command could not be executed"
    return f"exit code {code}"


def exited_before_ready(code: int | None) -> str:
    if code is not None and 0 <= code < 126:
        return f"Server exited with code {code} before it was ready"
    return f"Server exited before it was ready ({exit_phrase(code)})"


def record_baseline(plan: Plan, baseline: dict[str, int]) -> None:
    """Kept before the launch, so an adopter after a restart still has the level to verify
    against (the launch answer may never have been recorded)."""
    ServerInstance.objects.filter(pk=plan.instance_id).update(baseline_gpu_memory=baseline)
    plan.baseline_gpu_memory = baseline


def baseline_from_preflight(preflight: dict[str, Any], gpu_ids: list[int]) -> dict[str, int]:
    devices = (preflight.get("gpus") or {}).get("devices") or []
    return {
        str(d["index"]): int(d["used_mb"])
        for d in devices
        if d.get("index") in gpu_ids and d.get("used_mb") is not None
    }


def record_launch(plan: Plan, launch: dict[str, Any], baseline: dict[str, int]) -> Plan:
    message = (
        "Re-attached to the server already running for this run id"
        if launch.get("already_running")
        else "Launched detached: " + shlex.join(plan.argv)
    )
    services.instance_transition(
        instance_id=plan.instance_id,
        state=InstanceState.LOADING,
        message=message,
        pid=launch["pid"],
        supervisor_pid=launch.get("supervisor_pid"),
        pgid=launch.get("pgid"),
        sid=launch.get("sid"),
        proc_start_time=launch.get("start_time"),
        boot_id=launch.get("boot_id") or "",
        run_dir=launch.get("run_dir") or plan.run_dir,
        log_path=launch.get("log_path") or "",
        baseline_gpu_memory=baseline,
    )
    return replace(
        plan,
        state=InstanceState.LOADING,
        pid=launch["pid"],
        pgid=launch.get("pgid"),
        sid=launch.get("sid"),
        start_time=launch.get("start_time"),
        supervisor_pid=launch.get("supervisor_pid"),
        run_dir=launch.get("run_dir") or plan.run_dir,
        baseline_gpu_memory=baseline,
    )


def stop_requested(instance_id: int) -> bool:
    return bool(ServerInstance.objects.filter(pk=instance_id, stop_requested=True).exists())


def readiness_progress(plan: Plan, stage: str, detail: str) -> None:
    realtime.broadcast(
        realtime.instance_group(plan.instance_id),
        "instance.readiness",
        {"stage": stage, "detail": detail},
    )


def mark_ready(plan: Plan, server_info: dict[str, Any]) -> None:
    services.instance_transition(
        instance_id=plan.instance_id,
        state=InstanceState.READY,
        message="Ready: health, model list and a one-token completion answered",
        server_info=server_info,
    )
    plan.state = InstanceState.READY


def note(plan: Plan, message: str, *, once: bool = False) -> None:
    if once and message in plan.notes_sent:
        return
    plan.notes_sent.add(message)
    instance = ServerInstance.objects.get(pk=plan.instance_id)
    services.instance_record_event(instance=instance, message=message)


def update_log(plan: Plan, status: dict[str, Any]) -> None:
    log = status.get("log") or {}
    text = "\n".join(log.get("lines") or [])
    if text and text != plan.last_log:
        plan.last_log = text
        ServerInstance.objects.filter(pk=plan.instance_id).update(log_tail=text)
        realtime.broadcast(
            realtime.instance_group(plan.instance_id), "instance.log", {"log_tail": text}
        )


def mark_stopping(plan: Plan, reason: str) -> None:
    instance = ServerInstance.objects.get(pk=plan.instance_id)
    if instance.state != InstanceState.STOPPING:
        services.instance_transition(
            instance_id=plan.instance_id, state=InstanceState.STOPPING, message=reason
        )
    plan.state = InstanceState.STOPPING


def _evidence(stop: dict[str, Any] | None, verify: dict[str, Any]) -> dict[str, Any]:
    return {
        "reasons": verify.get("reasons", []),
        "holders": verify.get("holders", []),
        "members": verify.get("members", []),
        "gpu_memory": verify.get("gpu_memory"),
        "port": verify.get("port"),
        "stop": stop or {},
    }


GPU_TOLERANCE_MB = 512  # the agent's default tolerance too


def probe_gpu_problems(plan: Plan, reading: dict[str, Any] | None) -> list[str]:
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
    stop: dict[str, Any],
    verify: dict[str, Any],
    exit_code: int | None,
    failed: bool,
    probe_reading: dict[str, Any] | None = None,
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


def _verified_summary(stop: dict[str, Any], verify: dict[str, Any]) -> str:
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
    return f"terminated {terminated}, killed {killed}; port closed; {gpus}"


def _dirty_reasons(
    verify: dict[str, Any], probe_reading: dict[str, Any] | None, gpus: list[int]
) -> str:
    """The verification's reasons, plus what nvidia-smi says when no process could be named:
    memory held with no fd holder is a process in another namespace, or the driver's own."""
    text = "; ".join(verify.get("reasons", []))
    if any(h.get("counts") for h in verify.get("holders", [])):
        return text
    memory = verify.get("gpu_memory")
    held = (
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
    plan: Plan, reason: str, evidence: dict[str, Any], exit_code: int | None = None
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
    fields: dict[str, Any] = {"reason": reason, "evidence": evidence, "stop_requested": False}
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
    plan: Plan, claims: CleanupClaims, *, stop: dict[str, Any], verify: dict[str, Any]
) -> str:
    """A failed or crashed instance stays failed or crashed (its reason is the story); a lost
    one whose leftovers are verified gone is stopped."""
    evidence = _evidence(stop, verify)
    if claims.port_holder:
        evidence["not_checked"] = f"port {plan.port} (held by {claims.port_holder})"
    if claims.gpus:
        evidence["gpus_not_checked"] = claims.gpus
    if verify.get("verdict") == "stopped":
        final = (
            claims.came_from
            if claims.came_from in {InstanceState.FAILED, InstanceState.CRASHED}
            else InstanceState.STOPPED
        )
        fields: dict[str, Any] = {"evidence": evidence, "stop_requested": False}
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


def mark_crashed(plan: Plan, exit_code: int | None, status: dict[str, Any]) -> None:
    log = "\n".join((status.get("log") or {}).get("lines") or []) or plan.last_log
    services.instance_transition(
        instance_id=plan.instance_id,
        state=InstanceState.CRASHED,
        message=f"Server process died after it was ready ({exit_phrase(exit_code)})",
        reason=f"crashed: {exit_phrase(exit_code)}",
        exit_code=exit_code,
        log_tail=log,
        release_claims=False,
    )


def finish_crash_cleanup(plan: Plan, *, stop: dict[str, Any], verify: dict[str, Any]) -> None:
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


def mark_lost(plan: Plan, reason: str, evidence: dict[str, Any] | None = None) -> None:
    services.instance_transition(
        instance_id=plan.instance_id,
        state=InstanceState.LOST,
        message=reason,
        reason=reason,
        evidence=evidence or {},
    )


def fail(plan: Plan, reason: str, evidence: dict[str, Any] | None = None, **fields: Any) -> None:
    services.instance_transition(
        instance_id=plan.instance_id,
        state=InstanceState.FAILED,
        message=reason,
        reason=reason,
        evidence=evidence or {},
        **fields,
    )


async def afail(plan: Plan, reason: str, evidence: dict[str, Any] | None = None) -> None:
    await sync_to_async(fail)(plan, reason, evidence)


def enqueue_adoption(instance_id: int) -> None:
    """After an interrupted owner job: a new owner re-attaches (or declares the server lost)."""
    instance = ServerInstance.objects.filter(pk=instance_id).first()
    if instance is None or instance.state not in ACTIVE_STATES:
        return
    lock = services.instance_lock_key(instance_id)
    if Job.objects.filter(lock_key=lock, state__in=[JobState.QUEUED, JobState.RUNNING]).exists():
        return
    from hosts.jobs import job_enqueue

    job_enqueue(
        kind="server.run", params={"instance_id": instance_id, "adopt": True}, lock_key=lock
    )
    services.instance_record_event(
        instance=instance,
        kind=InstanceEvent.Kind.INFO,
        message="Its job was interrupted; a new one will re-adopt it",
    )
