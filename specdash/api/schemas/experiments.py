"""Experiments, comparisons, verdicts and the speculation schedule."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict

from ninja import Field, Schema
from pydantic import create_model

from benchlib.json_types import JsonObject
from benchlib.loadgen.settings import LoadSettings, input_fields
from benchmarks.experiments import selectors as exp_selectors
from benchmarks.experiments.axes import ARM_LOAD_AXES
from benchmarks.experiments.models import DEFAULT_ORDER, DEFAULT_REPEATS
from specdash.api.schemas.base import (
    Id,
    In,
    MaskedText,
    Notes,
    Page,
    RunOut,
    Tag,
    Title,
    UserName,
    url_resolver,
)
from specdash.api.schemas.decisions import DecisionOut
from specdash.api.schemas.jobs import JobOut
from specdash.api.schemas.sweeps import SweepLoadIn

# -- experiments and comparisons -----------------------------------------------------------


class ProtocolIn(In):
    """What every experiment body asks (a plain one and a matrix): its levels, load and the
    protocol's repeats and order, declared once."""

    levels: list[int] = Field(min_length=1, max_length=64, description="Concurrency levels")
    load: SweepLoadIn = Field(default_factory=lambda: SweepLoadIn.model_validate({}))
    name: Title = ""
    repeats: int = Field(
        DEFAULT_REPEATS,
        ge=1,
        le=10,
        description="Sweeps per arm, each a fresh server start; 1 is the single-run mode "
        "(within-run interval: leaves out run-to-run variance)",
    )
    order: str = Field(
        DEFAULT_ORDER.value,
        description="interleaved (A B B A, the default) or sequential (A A B B)",
    )

    def protocol_args(self) -> ProtocolArgs:
        """The protocol as the experiment services take it (unset load settings left out, so
        the load generator's defaults apply)."""
        return {
            "levels": self.levels,
            "load": self.load.model_dump(exclude_none=True),
            "name": self.name,
            "repeats": self.repeats,
            "order": self.order,
        }


class ProtocolArgs(TypedDict):
    """``ProtocolIn`` as keywords of ``experiment_create`` and the services built on it."""

    levels: list[int]
    load: JsonObject
    name: str
    repeats: int
    order: str


# An arm's own load settings: the acceptance axes of the one model (benchmarks.experiments.axes).
if TYPE_CHECKING:

    class ArmLoadIn(In): ...

else:
    ArmLoadIn = create_model(
        "ArmLoadIn",
        __base__=In,
        **{k: v for k, v in input_fields(LoadSettings).items() if k in ARM_LOAD_AXES},
    )


class ExperimentIn(ProtocolIn):
    profiles: list[Id] = Field(
        min_length=2,
        max_length=8,
        description="Profile ids; the first is A, the reference. A profile may appear twice "
        "when the two arms' arm_loads differ",
    )
    arm_loads: list[ArmLoadIn] = Field(
        default_factory=list,
        max_length=8,
        description="Each arm's own load settings, in profile order (fewer: the rest have "
        "none): the API (chat: the chat template applied; completions: the raw prompt) and the "
        "temperature (0: greedy), merged over `load` for that arm's sweeps",
    )
    continue_on_start_failure: bool = True
    check_output_equivalence: bool = False
    auto_resume: bool = Field(False, description="Resume by itself after a worker restart")
    notes: Notes = ""
    tags: list[Tag] = Field(default_factory=list, max_length=50)

    def experiment_args(self) -> ExperimentArgs:
        """The body as ``experiment_create``'s keywords, but for the arms' profiles (ids here,
        looked up by the handler) and the user."""
        return {
            **self.protocol_args(),
            "arm_loads": [arm.model_dump(exclude_none=True) for arm in self.arm_loads],
            "continue_on_start_failure": self.continue_on_start_failure,
            "check_output_equivalence": self.check_output_equivalence,
            "auto_resume": self.auto_resume,
            "notes": self.notes,
            "tags": self.tags,
        }


class ExperimentArgs(ProtocolArgs):
    """``ExperimentIn`` as keywords of ``experiment_create`` (its profiles aside)."""

    arm_loads: list[JsonObject]
    continue_on_start_failure: bool
    check_output_equivalence: bool
    auto_resume: bool
    notes: str
    tags: list[str]


class ArmOut(Schema):
    label: str
    profile_id: int
    profile: str
    load: JsonObject = Field(
        default_factory=dict, description="The arm's own load settings over the experiment's"
    )

    @staticmethod
    def resolve_profile(obj: Any) -> str:
        return str(obj.profile.name)


class StepOut(Schema):
    id: int
    index: int
    label: str
    profile: str
    repeat: int
    state: str
    reason: MaskedText
    instance_id: int | None
    sweep_id: int | None
    started_at: datetime | None
    finished_at: datetime | None

    @staticmethod
    def resolve_label(obj: Any) -> str:
        return str(obj.arm.label)

    @staticmethod
    def resolve_profile(obj: Any) -> str:
        return str(obj.arm.profile.name)

    @staticmethod
    def resolve_sweep_id(obj: Any) -> int | None:
        sweep = getattr(obj, "sweep", None)
        return sweep.pk if sweep is not None else None


class ExperimentOut(RunOut):
    id: int
    name: str
    state: str
    finished: bool
    reason: MaskedText
    levels: list[int]
    load: JsonObject
    repeats: int
    order: str
    arms: list[ArmOut]
    tags: list[str]
    notes: str
    has_comparison: bool
    auto_resume: bool
    history: list[JsonObject] = Field(description="Every interruption and resume, in order")
    created_by: UserName
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    job_id: int | None
    url: str

    @staticmethod
    def resolve_arms(obj: Any) -> list[Any]:
        return list(obj.arms.all())

    @staticmethod
    def resolve_has_comparison(obj: Any) -> bool:
        return bool(obj.comparison)

    resolve_url = url_resolver("experiments")


class ExperimentDetailOut(ExperimentOut):
    steps: list[StepOut]

    @staticmethod
    def resolve_steps(obj: Any) -> list[Any]:
        return exp_selectors.experiment_steps(experiment_id=obj.pk)


class ExperimentAccepted(Schema):
    experiment: ExperimentOut
    job: JobOut | None
    job_url: str | None


class ExperimentPage(Page):
    items: list[ExperimentOut]


class RatioOut(Schema):
    concurrency: int
    point: float
    low: float | None
    high: float | None
    method: str
    sign: int
    inconclusive: bool
    refused: str = Field("", description="Why an interval was computed but not published")


class VerdictOut(Schema):
    reference: str = Field(description="Label of the reference series (A)")
    candidate: str
    reference_name: str
    candidate_name: str
    text: str = Field(description="The decision's statements, joined")
    decision: DecisionOut | None = Field(
        None,
        description="The one decision every surface renders: per level the oriented ratio, "
        "status (ahead, behind, equivalent, inconclusive, not_comparable), reason and "
        "sentence; crossovers; bands with their action (on, off, none); the recommendation; "
        "margin and confidence; statements in order (docs/measurement.md)",
    )
    ratios: list[RatioOut] = Field(description="candidate / reference output tok/s per level")
    unmatched: list[int]
    crossover: JsonObject
    behind_from: int | None = Field(
        description="The decision's behind_from: smallest tested C from which every level "
        "is behind by its status (never from the points alone)"
    )
    ahead_from: int | None = Field(description="The decision's ahead_from (by status)")
    settled_conclusively: bool = Field(description="behind_from or ahead_from is set")
    reference_saturation: JsonObject
    candidate_saturation: JsonObject
    saturation_ratio: float | None
    speculative: bool
    speculative_name: str
    disable_speculation_above: int | None
    engine_options: list[JsonObject]


class ComparisonOut(Schema):
    version: int
    metric: str
    confidence: float
    reference: str | None
    series: list[JsonObject]
    verdicts: list[VerdictOut]
    rows: list[JsonObject]
    slo: JsonObject | None = Field(None, description="The SLO the goodput figures use")
    goodput_verdicts: list[JsonObject] = Field(
        default_factory=list, description="The verdicts on goodput tok/s under the SLO"
    )
    equivalence: JsonObject | None
    warnings: list[str]
    built_at: str
    declared_axis: list[str] = Field(
        default_factory=list,
        description="What the arms are declared to differ in: launch (their profiles), "
        "load: api, load: temperature (their own load settings)",
    )
    arm_loads: dict[str, JsonObject] = Field(
        default_factory=dict,
        description="Per arm label, its api and temperature (when the axis includes a load "
        "setting)",
    )


class ScheduleOut(Schema):
    available: bool = Field(description="False when no schedule can be derived (see message)")
    message: str = Field(
        description="Why there is no schedule (e.g. an arm's unreadable draft length)"
    )
    engine: str = Field(
        "", description="The arms' engine; simulator arms get every engine's config"
    )
    reference: str | None = Field(
        None, description="The simplest arm (kept where nothing is conclusive)"
    )
    confidence: float | None = None
    variants: list[JsonObject] = Field(
        default_factory=list, description="Each arm's label, profile name and draft length"
    )
    bands: list[JsonObject] = Field(
        default_factory=list,
        description="Concurrency bands (start, end: inclusive, null = no upper end) with the "
        "arm and draft length chosen, the tested levels inside, expected_gain over the "
        "runner-up and its interval gain_low..gain_high (null without one)",
    )
    steps: list[JsonObject] = Field(
        default_factory=list, description="Batch-size steps (start, end, draft_length)"
    )
    choices: list[JsonObject] = Field(
        default_factory=list, description="Per tested level: the chosen arm and why"
    )
    untested: list[int] = Field(default_factory=list, description="Levels some arm did not test")
    description: str = ""
    decision: JsonObject | None = Field(
        None,
        description="The matrix decision the page renders: its bands, steps (batch-size "
        "switches placed on the running batch sizes each level's server reported), "
        "thresholds (where the switches come from), batch_ranges, switch_costs (what each "
        "switch point is predicted to cost the level above it) and statements",
    )
    configs: list[JsonObject] = Field(
        default_factory=list,
        description="The engine configuration to paste: engine, option, exact, value (argv), "
        "note, source, version, and file_name/file_text for a config file it names",
    )
