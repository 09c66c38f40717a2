"""A/B experiments: profiles x levels, run unattended, then compared."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from benchmarks.sweeps.models import PlannedRun
from hosts.models import ServerInstance, ServerProfile


class ExperimentState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    COMPLETED = "completed", "Completed"
    CANCELLED = "cancelled", "Cancelled"
    FAILED = "failed", "Failed"
    HALTED = "halted", "Halted (dirty GPU)"
    INTERRUPTED = "interrupted", "Interrupted"


FINISHED_EXPERIMENT_STATES = frozenset(
    {
        ExperimentState.COMPLETED,
        ExperimentState.CANCELLED,
        ExperimentState.FAILED,
        ExperimentState.HALTED,
        ExperimentState.INTERRUPTED,
    }
)


class ExperimentOrder(models.TextChoices):
    SEQUENTIAL = "sequential", "Sequential (all of A, then all of B)"
    INTERLEAVED = "interleaved", "Interleaved (A B B A: balances drift and order)"


# The default protocol: each arm twice, interleaved A B B A (each run a fresh server start),
# so a level's interval comes from the repeats and holds the run-to-run variance, and drift
# and the order effect can be measured (docs/measurement.md, "Protocols"). One repeat (the
# single-run mode) stays available; its interval is a within-run one.
DEFAULT_REPEATS = 2
DEFAULT_ORDER = ExperimentOrder.INTERLEAVED


class Experiment(PlannedRun):
    finished_states = FINISHED_EXPERIMENT_STATES

    name = models.CharField(max_length=200)
    profiles: models.ManyToManyField[ServerProfile, ExperimentArm] = models.ManyToManyField(
        ServerProfile, through="ExperimentArm", related_name="+"
    )
    load = models.JSONField(default=dict, blank=True)
    repeats = models.PositiveSmallIntegerField(default=DEFAULT_REPEATS)
    order = models.CharField(max_length=12, choices=ExperimentOrder.choices, default=DEFAULT_ORDER)
    continue_on_start_failure = models.BooleanField(default=True)
    check_output_equivalence = models.BooleanField(default=False)
    # Opt-in: a worker that finds this experiment interrupted resumes it by itself.
    auto_resume = models.BooleanField(default=False)
    state = models.CharField(
        max_length=12, choices=ExperimentState.choices, default=ExperimentState.QUEUED
    )
    comparison = models.JSONField(default=dict, blank=True)
    # Why a halted experiment stopped: the dirty instance and what its stop verification found.
    evidence = models.JSONField(default=dict, blank=True)
    # Every interruption and resume, in order: {"t", "event", "reason", "step", "by"}.
    history = models.JSONField(default=list, blank=True)
    # A schedule verification only: what the schedule's decision predicted, before this ran,
    # that each switch point costs its neighbouring level (``switch_costs.SwitchCost`` dicts),
    # so the report puts the predicted and the measured ratio side by side.
    schedule_prediction = models.JSONField(default=list, blank=True)

    def __str__(self) -> str:
        return self.name


class ExperimentArm(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="arms")
    profile = models.ForeignKey(ServerProfile, on_delete=models.PROTECT, related_name="+")
    label = models.CharField(max_length=20, help_text="A, B, ...")
    position = models.PositiveSmallIntegerField(default=0)
    # The arm's own load settings over the experiment's, limited to the acceptance axes (the
    # API: chat template or raw prompt; the sampling temperature): its sweeps run the
    # experiment's load with these merged in (benchmarks.experiments.axes). {}: none.
    load = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["experiment", "position"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "label"], name="arm_unique_label")
        ]

    def __str__(self) -> str:
        return f"{self.label}: {self.profile}"


class StepState(models.TextChoices):
    PENDING = "pending", "Pending"
    STOPPING_PREVIOUS = "stopping_previous", "Stopping previous server"
    STARTING = "starting", "Starting server"
    CHECKING_OUTPUTS = "checking_outputs", "Checking outputs"
    SWEEPING = "sweeping", "Sweeping"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    SKIPPED = "skipped", "Skipped"
    CANCELLED = "cancelled", "Cancelled"
    INTERRUPTED = "interrupted", "Interrupted"


FINISHED_STEP_STATES = frozenset(
    {
        StepState.DONE,
        StepState.FAILED,
        StepState.SKIPPED,
        StepState.CANCELLED,
        StepState.INTERRUPTED,
    }
)


class ExperimentStep(models.Model):
    experiment = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()
    arm = models.ForeignKey(ExperimentArm, on_delete=models.CASCADE, related_name="steps")
    repeat = models.PositiveSmallIntegerField(default=0)
    state = models.CharField(max_length=20, choices=StepState.choices, default=StepState.PENDING)
    instance = models.ForeignKey(
        ServerInstance, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    reason = models.TextField(blank=True)
    # GPU names and driver as the host reported them while this step's server ran.
    environment = models.JSONField(default=dict, blank=True)
    # Outputs of the fixed greedy prompts (when the experiment checks output equivalence).
    equivalence = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["experiment", "index"]
        constraints = [
            models.UniqueConstraint(fields=["experiment", "index"], name="step_unique_index")
        ]

    def __str__(self) -> str:
        return f"{self.experiment} step {self.index}"

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_STEP_STATES


class BreakevenCheck(models.Model):
    """A placed prediction on a break-even map and the real A/B run to check it: the map's
    page keeps every one (benchmarks.experiments.breakeven)."""

    map_experiment = models.ForeignKey(
        Experiment, on_delete=models.CASCADE, related_name="breakeven_checks"
    )
    verification = models.ForeignKey(Experiment, on_delete=models.CASCADE, related_name="+")
    category = models.CharField(max_length=64)
    source = models.CharField(max_length=64, help_text="What was placed: experiment N, sweep N")
    # The placement of that category as it stood when the check was asked (CategoryPlacement).
    predicted = models.JSONField(default=dict)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"check of map {self.map_experiment_id}: {self.category}"
