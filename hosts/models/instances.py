"""Server instances: one launch of a profile, its state machine and its history."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from hosts.models.registry import Host, ServerProfile


class InstanceState(models.TextChoices):
    STARTING = "starting", "Starting"  # preflight and launch in progress
    LOADING = "loading", "Loading"  # process alive, waiting for readiness
    READY = "ready", "Ready"
    STOPPING = "stopping", "Stopping"
    STOPPED = "stopped", "Stopped"  # verified: no process, port closed, GPU memory back
    FAILED = "failed", "Failed"  # never became ready (exit, timeout, preflight)
    CRASHED = "crashed", "Crashed"  # was ready, then died
    DIRTY = "dirty", "Dirty"  # processes gone or not, but GPUs/port not clean
    LOST = "lost", "Lost"  # the dashboard can no longer find it


ACTIVE_STATES = frozenset(
    {InstanceState.STARTING, InstanceState.LOADING, InstanceState.READY, InstanceState.STOPPING}
)
# States that still hold the host's port and GPUs: a dirty GPU is not free.
HOLDING_STATES = ACTIVE_STATES | {InstanceState.DIRTY}
TERMINAL_STATES = frozenset(
    {InstanceState.STOPPED, InstanceState.FAILED, InstanceState.CRASHED, InstanceState.LOST}
)
# Entering these releases the port and GPU claims (a crash releases them only once its
# clean-up has verified the GPUs are free).
RELEASING_STATES = frozenset({InstanceState.STOPPED, InstanceState.FAILED, InstanceState.LOST})

# The allowed transitions; anything else is a bug in a service, and is refused.
TRANSITIONS: dict[str, frozenset[str]] = {
    InstanceState.STARTING: frozenset(
        {InstanceState.LOADING, InstanceState.FAILED, InstanceState.STOPPING, InstanceState.LOST,
         InstanceState.DIRTY}
    ),
    InstanceState.LOADING: frozenset(
        {InstanceState.READY, InstanceState.FAILED, InstanceState.STOPPING, InstanceState.LOST}
    ),
    InstanceState.READY: frozenset(
        {InstanceState.STOPPING, InstanceState.CRASHED, InstanceState.LOST}
    ),
    # A clean-up stop of a failed or crashed instance ends in the state it came from.
    InstanceState.STOPPING: frozenset(
        {InstanceState.STOPPED, InstanceState.DIRTY, InstanceState.FAILED, InstanceState.LOST,
         InstanceState.CRASHED}
    ),
    InstanceState.DIRTY: frozenset({InstanceState.STOPPING, InstanceState.STOPPED}),
    # Leftovers happen: an ended instance gets a verified clean-up stop on request.
    InstanceState.FAILED: frozenset({InstanceState.STOPPING}),
    # A crash is shown at once; the clean-up that follows may find leftovers (dirty).
    InstanceState.CRASHED: frozenset({InstanceState.DIRTY, InstanceState.STOPPING}),
    # STOPPED directly: a clean-up that found nothing, its port meanwhile held by another.
    InstanceState.LOST: frozenset(
        {InstanceState.READY, InstanceState.STOPPING, InstanceState.STOPPED}
    ),
    InstanceState.STOPPED: frozenset(),
}  # fmt: skip


class ServerInstance(models.Model):
    profile = models.ForeignKey(ServerProfile, on_delete=models.PROTECT, related_name="instances")
    # Denormalised from the profile at launch: the port/host claim must not move if the
    # profile is edited while the server runs.
    host = models.ForeignKey(Host, on_delete=models.PROTECT, related_name="instances")
    port = models.PositiveIntegerField()
    gpu_ids = models.JSONField(default=list, blank=True)
    state = models.CharField(
        max_length=10, choices=InstanceState.choices, default=InstanceState.STARTING
    )
    run_id = models.CharField(max_length=64, unique=True, help_text="SPECDASH_RUN_ID marker")
    launch_argv = models.JSONField(default=list)
    env = models.JSONField(default=dict, blank=True)
    run_dir = models.CharField(max_length=500, blank=True)
    log_path = models.CharField(max_length=500, blank=True)
    pid = models.IntegerField(null=True, blank=True)
    supervisor_pid = models.IntegerField(null=True, blank=True)
    pgid = models.IntegerField(null=True, blank=True)
    sid = models.IntegerField(null=True, blank=True)
    proc_start_time = models.BigIntegerField(
        null=True, blank=True, help_text="Clock ticks since boot (/proc/<pid>/stat field 22)"
    )
    boot_id = models.CharField(max_length=64, blank=True)
    stop_requested = models.BooleanField(default=False)
    exit_code = models.IntegerField(null=True, blank=True)
    reason = models.TextField(blank=True, help_text="Why it failed, crashed, or is dirty")
    log_tail = models.TextField(blank=True)
    # The wait for readiness as last probed ("health /health answered 503"), kept so that a
    # page or socket that comes after the probe's one broadcast still shows what it waits on.
    readiness = models.TextField(blank=True)
    evidence = models.JSONField(default=dict, blank=True)
    baseline_gpu_memory = models.JSONField(default=dict, blank=True)
    server_info = models.JSONField(default=dict, blank=True)
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    ready_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # Two operators starting servers on one port at once: the database lets one win.
            models.UniqueConstraint(
                fields=["host", "port"],
                condition=models.Q(state__in=sorted(HOLDING_STATES)),
                name="instance_one_holder_per_port",
            )
        ]
        permissions = [("operate_serverinstance", "Can start and stop servers")]

    def __str__(self) -> str:
        return f"{self.profile} #{self.pk} ({self.state})"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def can_stop(self) -> bool:
        """A Stop does something: a stop or a verified clean-up is still to come (not once
        stopped, nor while a stop runs)."""
        return InstanceState.STOPPING in TRANSITIONS[self.state]

    @property
    def can_start_again(self) -> bool:
        """Ended: its profile may be started again (the start's preflight still checks that
        the port and GPUs are free)."""
        return self.state in TERMINAL_STATES

    @property
    def base_url(self) -> str:
        address = self.profile.api_host or (
            self.host.address if self.host.kind == "ssh" else "127.0.0.1"
        )
        if ":" in address and not address.startswith("["):
            address = f"[{address}]"
        return f"http://{address}:{self.port}"


class GpuClaim(models.Model):
    """A GPU held by an instance; the unique constraint makes GPU assignment race-free."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="gpu_claims")
    gpu_index = models.PositiveIntegerField()
    instance = models.ForeignKey(
        ServerInstance, on_delete=models.CASCADE, related_name="gpu_claims"
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["host", "gpu_index"], name="gpu_one_holder")]

    def __str__(self) -> str:
        return f"GPU {self.gpu_index} on {self.host} held by #{self.instance_id}"


class InstanceEvent(models.Model):
    """The history of an instance: state changes, operator actions and their outcomes."""

    class Kind(models.TextChoices):
        STATE = "state", "State change"
        ACTION = "action", "Operator action"
        INFO = "info", "Information"

    instance = models.ForeignKey(ServerInstance, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(auto_now_add=True)
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.STATE)
    state = models.CharField(max_length=10, choices=InstanceState.choices, blank=True)
    message = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.at:%H:%M:%S} {self.kind} {self.state} {self.message[:40]}"
