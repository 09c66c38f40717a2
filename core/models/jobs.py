"""Background jobs. Their state lives here, in the database, so that any worker process on
any machine can run them, a restarted dashboard shows the truth, and a dead worker is detected
by its expired lease. See core/jobs/ for the worker and docs/operations.md for the design.

What a running job reports as it goes (a load-generator shard's events and request records)
is appended as ``JobEvent`` rows, each written once and never updated, so a reader polls only
the rows after the last ``seq`` it has seen and the cost of a report grows with what is new in
it, never with what came before."""

from __future__ import annotations

from django.db import models

from core.models.runs import Run


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    INTERRUPTED = "interrupted", "Interrupted"  # its worker died (lease expired) or shut down


class JobHook(models.TextChoices):
    """The follow-up a job's kind owes after a reap or a forced cancel (``Job.hook_owed``)."""

    INTERRUPTED = "interrupted", "Interrupt hook"  # the job's worker died or shut down
    CANCEL_FORCED = "cancel_forced", "Forced-cancel hook"  # a cancel that did not wait for it


FINISHED_JOB_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.INTERRUPTED}
)


class Job(Run):
    finished_states = FINISHED_JOB_STATES

    kind = models.CharField(max_length=64)
    params = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.QUEUED)
    # Jobs that drive the same thing (a server instance, a host port) share a lock key; the
    # partial unique constraint lets only one of them run at a time, across all workers.
    lock_key = models.CharField(max_length=100, blank=True)
    worker_id = models.CharField(max_length=100, blank=True)
    # Placement: only a worker with this tag may claim it (blank: any worker); jobs sharing a
    # spread key run on distinct machines (the partial unique index below), never doubled up.
    tag = models.CharField(max_length=64, blank=True)
    spread_key = models.CharField(max_length=100, blank=True)
    machine = models.CharField(max_length=100, blank=True)  # the claiming worker's machine
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    result = models.JSONField(default=dict, blank=True)
    # Why it ended other than by succeeding: the failure, the interruption or the cancel.
    error = models.TextField(blank=True)
    # The follow-up a reap or a forced cancel owes ("interrupted" / "cancel_forced"), set in
    # the same UPDATE as the final state and cleared in the transaction of the hook's own
    # writes, so a reaper that dies in between leaves it owed and any worker runs it later.
    hook_owed = models.CharField(max_length=16, choices=JobHook.choices, blank=True)
    # Gang start: when the job said it was ready, and the common start its gang was given.
    ready_at = models.DateTimeField(null=True, blank=True)
    start_at = models.FloatField(null=True, blank=True)

    class Meta(Run.Meta):
        db_table = "hosts_job"  # created by hosts' migrations; moved here unchanged
        indexes = [
            models.Index(fields=["state", "created_at"], name="job_state_created"),
            models.Index(
                fields=["hook_owed"], condition=~models.Q(hook_owed=""), name="job_hook_owed"
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["lock_key"],
                condition=models.Q(state=JobState.RUNNING) & ~models.Q(lock_key=""),
                name="job_one_running_per_lock",
            ),
            models.UniqueConstraint(
                fields=["spread_key", "machine"],
                condition=models.Q(state=JobState.RUNNING) & ~models.Q(spread_key=""),
                name="job_one_running_per_spread_machine",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk} ({self.state})"


class JobEvent(models.Model):
    """One entry a running job appended about itself, numbered from 1 per job. Written once
    (``core.jobs.fence.job_append``, fenced like every write a job makes), never updated."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    # What the payload is to its reader; the sweep shards use "event" and "record".
    kind = models.CharField(max_length=16)
    payload = models.JSONField()

    class Meta:
        db_table = "hosts_jobevent"  # created by hosts' migrations; moved here unchanged
        ordering = ["job", "seq"]
        constraints = [
            # Also the index a reader's "after seq N" query runs on.
            models.UniqueConstraint(fields=["job", "seq"], name="job_event_one_per_seq"),
        ]

    def __str__(self) -> str:
        return f"job #{self.job_id} {self.kind} {self.seq}"
