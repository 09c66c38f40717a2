"""Synchronous, persisted steps of the lifecycle jobs (awaited through their twins in
``hosts.lifecycle.store``).

Every step writes its outcome to the database before the job moves on, so a refresh, a
second viewer or a restarted dashboard sees the truth.
"""

from __future__ import annotations

import shlex
import signal
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from django.conf import settings

from benchlib.json_types import JsonObject
from core import realtime
from core.models import Job, JobState
from hosts import services
from hosts.agent.parts.arguments import Identity
from hosts.agent.parts.control import StatusAnswer
from hosts.agent.parts.launch import LaunchAnswer, PreflightAnswer
from hosts.channel import INSTANCE_LOG, INSTANCE_READINESS
from hosts.lifecycle.readiness import ReadinessTarget, ServerInfo
from hosts.masking import masked_argv, masked_text
from hosts.models import Container, Host, InstanceEvent, InstanceState, ServerInstance
from hosts.models.instances import ACTIVE_STATES

LOG_LINES = 60
# Ended instances a Stop cleans up after (with a verified stop of whatever is left).
CLEANUP_STATES = frozenset({InstanceState.FAILED, InstanceState.CRASHED, InstanceState.LOST})


# The arguments of the agent commands the lifecycle sends (the agent reads each through its
# checked readers, hosts.agent.parts.arguments); the run's identity is the agent's `Identity`.


class PreflightArgs(TypedDict):
    port: int
    gpus: list[int]
    binary: str
    workdir: str | None
    device_dirs: list[str]


class LaunchArgs(TypedDict):
    run_id: str
    argv: list[str]
    env: dict[str, str]
    workdir: str | None
    run_dir: str
    port: int


class StatusArgs(Identity):
    run_dir: str
    port: int
    log_lines: int


class StopArgs(Identity):
    supervisor_pid: int | None
    run_dir: str
    grace_seconds: float
    kill_wait_seconds: float


class VerifyArgs(Identity):
    port: int | None  # None: the port is someone else's now (a clean-up stop leaves it out)
    gpus: list[int]
    baseline_gpu_mem_mb: dict[str, int]
    device_dirs: list[str]


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

    def identity(self) -> Identity:
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

    def preflight_args(self) -> PreflightArgs:
        return {
            "port": self.port,
            "gpus": self.gpu_ids,
            "binary": self.argv[0],
            "workdir": self.workdir or None,
            "device_dirs": self.device_dirs(),
        }

    def launch_args(self) -> LaunchArgs:
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

    def status_args(self) -> StatusArgs:
        return {
            **self.identity(),
            "run_dir": self.run_dir,
            "port": self.port,
            "log_lines": LOG_LINES,
        }

    def stop_args(self) -> StopArgs:
        return {
            **self.identity(),
            "supervisor_pid": self.supervisor_pid,
            "run_dir": self.run_dir,
            "grace_seconds": self.grace_s,
            "kill_wait_seconds": 5,
        }

    def verify_args(self) -> VerifyArgs:
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


def baseline_from_preflight(preflight: PreflightAnswer, gpu_ids: list[int]) -> dict[str, int]:
    gpus = preflight.get("gpus")
    devices = (gpus.get("devices") if gpus else None) or []
    baseline: dict[str, int] = {}
    for d in devices:
        used = d.get("used_mb")
        if d.get("index") in gpu_ids and used is not None:
            baseline[str(d["index"])] = int(used)
    return baseline


def record_launch(plan: Plan, launch: LaunchAnswer, baseline: dict[str, int]) -> Plan:
    message = (
        "Re-attached to the server already running for this run id"
        if launch.get("already_running")
        else "Launched detached: " + shlex.join(masked_argv(plan.argv))
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
    """A new stage of the wait: stored as well as sent, since a page (or its socket) that
    comes after this one broadcast would otherwise say nothing about what it waits on."""
    ServerInstance.objects.filter(pk=plan.instance_id).update(readiness=f"{stage} {detail}".strip())
    INSTANCE_READINESS.broadcast(
        realtime.instance_group(plan.instance_id), {"stage": stage, "detail": masked_text(detail)}
    )


def mark_ready(plan: Plan, server_info: ServerInfo) -> None:
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


def _log_text(status: StatusAnswer) -> str:
    """The server log's tail in a status answer ("" when it has none)."""
    log = status.get("log")
    return "\n".join((log.get("lines") if log else None) or [])


def update_log(plan: Plan, status: StatusAnswer) -> None:
    text = _log_text(status)
    if text and text != plan.last_log:
        plan.last_log = text
        ServerInstance.objects.filter(pk=plan.instance_id).update(log_tail=text)
        INSTANCE_LOG.broadcast(
            realtime.instance_group(plan.instance_id), {"log_tail": masked_text(text)}
        )


def mark_stopping(plan: Plan, reason: str) -> None:
    instance = ServerInstance.objects.get(pk=plan.instance_id)
    if instance.state != InstanceState.STOPPING:
        services.instance_transition(
            instance_id=plan.instance_id, state=InstanceState.STOPPING, message=reason
        )
    plan.state = InstanceState.STOPPING


def mark_crashed(plan: Plan, exit_code: int | None, status: StatusAnswer) -> None:
    log = _log_text(status) or plan.last_log
    services.instance_transition(
        instance_id=plan.instance_id,
        state=InstanceState.CRASHED,
        message=f"Server process died after it was ready ({exit_phrase(exit_code)})",
        reason=f"crashed: {exit_phrase(exit_code)}",
        exit_code=exit_code,
        log_tail=log,
        release_claims=False,
    )


def mark_lost(plan: Plan, reason: str, evidence: JsonObject | None = None) -> None:
    services.instance_transition(
        instance_id=plan.instance_id,
        state=InstanceState.LOST,
        message=reason,
        reason=reason,
        evidence=evidence or {},
    )


def fail(plan: Plan, reason: str, evidence: JsonObject | None = None, **fields: Any) -> None:
    services.instance_transition(
        instance_id=plan.instance_id,
        state=InstanceState.FAILED,
        message=reason,
        reason=reason,
        evidence=evidence or {},
        **fields,
    )


def enqueue_adoption(instance_id: int) -> None:
    """After an interrupted owner job: a new owner re-attaches (or declares the server lost)."""
    instance = ServerInstance.objects.filter(pk=instance_id).first()
    if instance is None or instance.state not in ACTIVE_STATES:
        return
    lock = services.instance_lock_key(instance_id)
    if Job.objects.filter(lock_key=lock, state__in=[JobState.QUEUED, JobState.RUNNING]).exists():
        return
    from core.jobs import job_enqueue

    job_enqueue(
        kind="server.run", params={"instance_id": instance_id, "adopt": True}, lock_key=lock
    )
    services.instance_record_event(
        instance=instance,
        kind=InstanceEvent.Kind.INFO,
        message="Its job was interrupted; a new one will re-adopt it",
    )
