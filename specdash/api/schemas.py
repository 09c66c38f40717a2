"""Request and response bodies. Output schemas read model attributes (``from_attributes``);
input schemas refuse unknown keys so a typo is a 422, not a silently ignored setting."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from ninja import Field, Schema
from pydantic import ConfigDict, StringConstraints, create_model

from benchmarks import selectors as bench_selectors
from benchmarks.experiments import selectors as exp_selectors
from benchmarks.loadgen.settings import LoadSettings, SloSettings, input_fields
from hosts.masking import masked_env  # secret values are not sent to API clients
from hosts.models.registry import default_stop_grace_s

# Database ids are 64-bit; a larger number can only be a miss, and must not overflow SQL.
MAX_ID = 2**63 - 1
Id = Annotated[int, Field(ge=1, le=MAX_ID)]
# No NUL or other control characters (PostgreSQL refuses NUL in text).
_TEXT = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f]*$"
Text = Annotated[str, StringConstraints(pattern=_TEXT)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=_TEXT)]


class In(Schema):
    model_config = ConfigDict(extra="forbid")


# -- errors -------------------------------------------------------------------------------


class ErrorDetail(Schema):
    code: str = Field(description="Stable machine-readable code, e.g. validation_error")
    message: str
    fields: dict[str, list[str]] = Field(
        default_factory=dict, description="Per-field messages (validation errors only)"
    )


class ErrorOut(Schema):
    error: ErrorDetail


# -- registry -----------------------------------------------------------------------------


class HostOut(Schema):
    id: int
    name: str
    kind: str
    address: str
    ssh_user: str
    ssh_port: int
    identity_file: str
    known_hosts_policy: str
    known_hosts_file: str
    jump_host: str
    path_prepend: str
    command_env: dict[str, Any]
    notes: str
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_command_env(obj: Any) -> dict[str, Any]:
        return masked_env(dict(obj.command_env))


class HostIn(In):
    name: Name
    kind: str = "local"
    address: Annotated[str, StringConstraints(max_length=255, pattern=_TEXT)] = ""
    ssh_user: Annotated[str, StringConstraints(max_length=64, pattern=_TEXT)] = "root"
    ssh_port: int = Field(22, ge=1, le=65535)
    identity_file: Annotated[str, StringConstraints(max_length=500, pattern=_TEXT)] = ""
    known_hosts_policy: str = "strict"
    known_hosts_file: Annotated[str, StringConstraints(max_length=500, pattern=_TEXT)] = ""
    jump_host: Annotated[str, StringConstraints(max_length=255, pattern=_TEXT)] = ""
    path_prepend: Annotated[str, StringConstraints(max_length=1000, pattern=_TEXT)] = ""
    command_env: dict[Text, Text] = Field(default_factory=dict)
    notes: Text = ""


class HostPatch(In):
    name: Name | None = None
    kind: str | None = None
    address: Annotated[str, StringConstraints(max_length=255, pattern=_TEXT)] | None = None
    ssh_user: Annotated[str, StringConstraints(max_length=64, pattern=_TEXT)] | None = None
    ssh_port: int | None = Field(None, ge=1, le=65535)
    identity_file: Annotated[str, StringConstraints(max_length=500, pattern=_TEXT)] | None = None
    known_hosts_policy: str | None = None
    known_hosts_file: Annotated[str, StringConstraints(max_length=500, pattern=_TEXT)] | None = None
    jump_host: Annotated[str, StringConstraints(max_length=255, pattern=_TEXT)] | None = None
    path_prepend: Annotated[str, StringConstraints(max_length=1000, pattern=_TEXT)] | None = None
    command_env: dict[Text, Text] | None = None
    notes: Text | None = None


class ContainerOut(Schema):
    id: int
    host_id: int
    host: str
    kind: str
    ident: str
    label: str
    notes: str

    @staticmethod
    def resolve_host(obj: Any) -> str:
        return str(obj.host.name)


class ContainerIn(In):
    host_id: Id
    kind: str = "pct"
    ident: Annotated[str, StringConstraints(max_length=100, pattern=_TEXT)] = ""
    label: Annotated[str, StringConstraints(max_length=100, pattern=_TEXT)] = ""
    notes: Text = ""


class ContainerPatch(In):
    host_id: Id | None = None
    kind: str | None = None
    ident: Annotated[str, StringConstraints(max_length=100, pattern=_TEXT)] | None = None
    label: Annotated[str, StringConstraints(max_length=100, pattern=_TEXT)] | None = None
    notes: Text | None = None


class ProfileOut(Schema):
    id: int
    name: str
    engine: str
    host_id: int
    host: str
    container_id: int | None
    launch_argv: list[str]
    env: dict[str, Any]
    workdir: str
    port: int
    gpu_ids: list[int]
    readiness_path: str
    readiness_status: int
    readiness_timeout_s: int
    stop_grace_s: int
    api_host: str
    openai_base_path: str
    served_model_name: str
    metrics_path: str
    speculative: bool
    tags: list[str]
    notes: str
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_host(obj: Any) -> str:
        return str(obj.host.name)

    @staticmethod
    def resolve_env(obj: Any) -> dict[str, Any]:
        return masked_env(dict(obj.env))


_Path = Annotated[str, StringConstraints(max_length=200, pattern=_TEXT)]


class ProfileIn(In):
    name: Annotated[str, StringConstraints(min_length=1, max_length=120, pattern=_TEXT)]
    engine: str = "sglang"
    host_id: Id
    container_id: Id | None = None
    launch_argv: list[Text] = Field(min_length=1)
    env: dict[Text, Text] = Field(default_factory=dict)
    workdir: Annotated[str, StringConstraints(max_length=500, pattern=_TEXT)] = ""
    port: int = Field(ge=1, le=65535)
    gpu_ids: list[Annotated[int, Field(ge=0, le=1023)]] = Field(default_factory=list)
    readiness_path: _Path = "/health"
    readiness_status: int = Field(200, ge=100, le=599)
    readiness_timeout_s: int = Field(600, ge=1, le=86_400)
    stop_grace_s: int = Field(default_factory=default_stop_grace_s, ge=0, le=3600)
    api_host: Annotated[str, StringConstraints(max_length=255, pattern=_TEXT)] = ""
    openai_base_path: _Path = "/v1"
    served_model_name: _Path = ""
    metrics_path: _Path = "/metrics"
    speculative: bool = False
    tags: list[Annotated[str, StringConstraints(max_length=50, pattern=_TEXT)]] = Field(
        default_factory=list
    )
    notes: Text = ""


class ProfilePatch(In):
    name: Annotated[str, StringConstraints(min_length=1, max_length=120, pattern=_TEXT)] | None = (
        None
    )
    engine: str | None = None
    host_id: Id | None = None
    container_id: Id | None = None
    launch_argv: list[Text] | None = Field(None, min_length=1)
    env: dict[Text, Text] | None = None
    workdir: Annotated[str, StringConstraints(max_length=500, pattern=_TEXT)] | None = None
    port: int | None = Field(None, ge=1, le=65535)
    gpu_ids: list[Annotated[int, Field(ge=0, le=1023)]] | None = None
    readiness_path: _Path | None = None
    readiness_status: int | None = Field(None, ge=100, le=599)
    readiness_timeout_s: int | None = Field(None, ge=1, le=86_400)
    stop_grace_s: int | None = Field(None, ge=0, le=3600)
    api_host: Annotated[str, StringConstraints(max_length=255, pattern=_TEXT)] | None = None
    openai_base_path: _Path | None = None
    served_model_name: _Path | None = None
    metrics_path: _Path | None = None
    speculative: bool | None = None
    tags: list[Annotated[str, StringConstraints(max_length=50, pattern=_TEXT)]] | None = None
    notes: Text | None = None


# -- jobs and instances -------------------------------------------------------------------


class JobOut(Schema):
    id: int
    kind: str
    state: str
    finished: bool
    params: dict[str, Any]
    result: dict[str, Any]
    error: str = Field(
        description="Why it ended other than succeeding: the failure, the interruption (worker "
        "shut down, lease not renewed) or the cancel (within the grace, or forced)"
    )
    cancel_requested: bool
    worker_id: str = Field(description="The worker that claimed it")
    machine: str = Field(description="That worker's machine, as one-per-machine placement counts")
    tag: str = Field(description="The worker tag it asked for (empty: any worker)")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    url: str

    @staticmethod
    def resolve_finished(obj: Any) -> bool:
        return bool(obj.is_finished)

    @staticmethod
    def resolve_url(obj: Any) -> str:
        return f"/api/v1/jobs/{obj.pk}"


class InstanceOut(Schema):
    id: int
    profile_id: int
    profile: str
    host_id: int
    host: str
    state: str
    active: bool
    port: int
    gpu_ids: list[int]
    run_id: str
    pid: int | None
    exit_code: int | None
    reason: str
    evidence: dict[str, Any]
    stop_requested: bool
    started_by: str | None
    created_at: datetime
    ready_at: datetime | None
    stopped_at: datetime | None
    url: str

    @staticmethod
    def resolve_profile(obj: Any) -> str:
        return str(obj.profile.name)

    @staticmethod
    def resolve_host(obj: Any) -> str:
        return str(obj.host.name)

    @staticmethod
    def resolve_started_by(obj: Any) -> str | None:
        return obj.started_by.get_username() if obj.started_by is not None else None

    @staticmethod
    def resolve_active(obj: Any) -> bool:
        return bool(obj.is_active)

    @staticmethod
    def resolve_url(obj: Any) -> str:
        return f"/api/v1/instances/{obj.pk}"


class InstanceAccepted(Schema):
    instance: InstanceOut
    job: JobOut | None = Field(description="The job doing the work; poll its url")
    job_url: str | None


class InstanceEventOut(Schema):
    id: int
    at: datetime
    kind: str
    state: str
    message: str
    actor: str | None
    data: dict[str, Any]

    @staticmethod
    def resolve_actor(obj: Any) -> str | None:
        return obj.actor.get_username() if obj.actor is not None else None


class LogOut(Schema):
    instance_id: int
    state: str
    lines: list[str]


class HolderIn(In):
    pid: int = Field(ge=1, le=2**31 - 1)
    start_time: int = Field(ge=0, le=MAX_ID)


class KillHoldersIn(In):
    holders: list[HolderIn] = Field(min_length=1, max_length=1000)
    confirm: bool = Field(description="Must be true: the listed processes are killed")


# -- sweeps -------------------------------------------------------------------------------


# The load settings' request bodies, from the one model (benchmarks.loadgen.settings): every
# setting optional (the service fills in the defaults and checks the values, per field).
if TYPE_CHECKING:

    class SloIn(In): ...

    class SweepLoadIn(In): ...

else:
    SloIn = create_model("SloIn", __base__=In, **input_fields(SloSettings))
    SweepLoadIn = create_model(
        "SweepLoadIn", __base__=In, **input_fields(LoadSettings, nested={"slo": SloIn})
    )


class SweepIn(In):
    instance_id: Id | None = Field(None, description="A ready server instance")
    base_url: Annotated[str, StringConstraints(max_length=300, pattern=_TEXT)] = Field(
        "", description="Or an http(s) URL of a server specdash did not start"
    )
    levels: list[int] = Field(min_length=1, max_length=64, description="Concurrency levels")
    load: SweepLoadIn = Field(default_factory=lambda: SweepLoadIn.model_validate({}))
    name: Annotated[str, StringConstraints(max_length=200, pattern=_TEXT)] = ""
    notes: Annotated[str, StringConstraints(max_length=10_000, pattern=_TEXT)] = ""
    tags: list[Annotated[str, StringConstraints(max_length=50, pattern=_TEXT)]] = Field(
        default_factory=list, max_length=50
    )


class ProgressOut(Schema):
    level_number: int
    level_count: int
    finished_levels: int
    eta_s: float | None


class SweepOut(Schema):
    id: int
    name: str
    state: str
    finished: bool
    instance_id: int | None
    profile_id: int | None
    profile: str | None
    base_url: str
    levels: list[int]
    load: dict[str, Any]
    reason: str
    current_level_index: int | None
    notes: str
    tags: list[str]
    created_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    job_id: int | None
    url: str

    @staticmethod
    def resolve_profile(obj: Any) -> str | None:
        return obj.profile.name if obj.profile is not None else None

    @staticmethod
    def resolve_created_by(obj: Any) -> str | None:
        return obj.created_by.get_username() if obj.created_by is not None else None

    @staticmethod
    def resolve_finished(obj: Any) -> bool:
        return bool(obj.is_finished)

    @staticmethod
    def resolve_url(obj: Any) -> str:
        return f"/api/v1/sweeps/{obj.pk}"


class SweepDetailOut(SweepOut):
    environment: dict[str, Any]
    progress: ProgressOut

    @staticmethod
    def resolve_progress(obj: Any) -> dict[str, Any]:
        levels = bench_selectors.sweep_levels(sweep_id=obj.pk)
        return bench_selectors.sweep_progress(sweep=obj, levels=levels)


class SweepAccepted(Schema):
    sweep: SweepOut
    job: JobOut | None
    job_url: str | None


class LevelOut(Schema):
    index: int
    concurrency: int = Field(description="The level's C (in a rate sweep: the in-flight cap)")
    target_rate: float | None = Field(
        description="The offered request rate of an open-loop level (req/s; null: closed loop)"
    )
    state: str
    output_tok_s: float | None
    steady_output_tok_s: float | None
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    tpot_p50_ms: float | None
    itl_p50_ms: float | None
    itl_p99_ms: float | None
    e2e_p50_ms: float | None
    achieved_concurrency: float | None
    requests_ok: int
    requests_failed: int
    reason: str
    attempt: int = Field(description="The sweep attempt whose records this level summarises")
    earlier_attempts: list[dict[str, Any]] = Field(
        description="What earlier attempts of this level measured before it was run again"
    )
    started_at: datetime | None
    finished_at: datetime | None
    summary: dict[str, Any]
    server_metrics: dict[str, Any] = Field(
        description="The server's own figures over exactly this level (available false when "
        "not scraped), from /metrics counter differences (docs/measurement.md): accept_length "
        "per drafted step and tokens_per_step per engine step, each with its *_source "
        "(counters: 1 + accepted/drafts; "
        "verify_counters: (generation - requests) / verify calls; itl_counters: (generation - "
        "requests) / ITL count; gauge: the engine's own gauge, its window, not the level); "
        "latencies ttft_s / itl_s / e2e_s in seconds, itl_unit saying what one ITL sample is "
        "(engine_step for vLLM: one per verify step under speculation; token for SGLang) and "
        "ttft_resolution_s the first TTFT bucket bound where it is coarse (SGLang: 0.1 s); "
        "ttft_bucket_limited (bool) true when the level's TTFT median lies in that first "
        "bucket, so the ttft_s quantiles are bucket interpolations, not measurements (the mean, "
        "sum / count, stays exact). The per-request speculative figures (verify steps, drafted "
        "and accepted tokens the engine reported for each request) are in summary.acceptance."
    )

    @staticmethod
    def resolve_target_rate(obj: Any) -> float | None:
        rate = (obj.summary or {}).get("target_rate")
        return float(rate) if isinstance(rate, int | float) else None


class SampleOut(Schema):
    level_index: int
    t: float
    data: dict[str, Any]


# -- pages --------------------------------------------------------------------------------


class Page(Schema):
    count: int = Field(description="Items matching the filters, over all pages")
    limit: int
    offset: int
    next: str | None = Field(description="Path of the next page, null on the last")


class HostPage(Page):
    items: list[HostOut]


class ContainerPage(Page):
    items: list[ContainerOut]


class ProfilePage(Page):
    items: list[ProfileOut]


class InstancePage(Page):
    items: list[InstanceOut]


class InstanceEventPage(Page):
    items: list[InstanceEventOut]


class SweepPage(Page):
    items: list[SweepOut]


class SamplePage(Page):
    items: list[SampleOut]


class JobPage(Page):
    items: list[JobOut]


# -- experiments and comparisons -----------------------------------------------------------


class ExperimentIn(In):
    profiles: list[Id] = Field(
        min_length=2, max_length=8, description="Profile ids; the first is A, the reference"
    )
    levels: list[int] = Field(min_length=1, max_length=64, description="Concurrency levels")
    load: SweepLoadIn = Field(default_factory=lambda: SweepLoadIn.model_validate({}))
    name: Annotated[str, StringConstraints(max_length=200, pattern=_TEXT)] = ""
    repeats: int = Field(1, ge=1, le=10)
    order: str = Field("sequential", description="sequential (A A B B) or interleaved (A B A B)")
    continue_on_start_failure: bool = True
    check_output_equivalence: bool = False
    auto_resume: bool = Field(False, description="Resume by itself after a worker restart")
    notes: Annotated[str, StringConstraints(max_length=10_000, pattern=_TEXT)] = ""
    tags: list[Annotated[str, StringConstraints(max_length=50, pattern=_TEXT)]] = Field(
        default_factory=list, max_length=50
    )


class ArmOut(Schema):
    label: str
    profile_id: int
    profile: str

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
    reason: str
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


class ExperimentOut(Schema):
    id: int
    name: str
    state: str
    finished: bool
    reason: str
    levels: list[int]
    load: dict[str, Any]
    repeats: int
    order: str
    arms: list[ArmOut]
    tags: list[str]
    notes: str
    has_comparison: bool
    auto_resume: bool
    history: list[dict[str, Any]] = Field(description="Every interruption and resume, in order")
    created_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    job_id: int | None
    url: str

    @staticmethod
    def resolve_finished(obj: Any) -> bool:
        return bool(obj.is_finished)

    @staticmethod
    def resolve_arms(obj: Any) -> list[Any]:
        return list(obj.arms.all())

    @staticmethod
    def resolve_has_comparison(obj: Any) -> bool:
        return bool(obj.comparison)

    @staticmethod
    def resolve_created_by(obj: Any) -> str | None:
        return obj.created_by.get_username() if obj.created_by is not None else None

    @staticmethod
    def resolve_url(obj: Any) -> str:
        return f"/api/v1/experiments/{obj.pk}"


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
    text: str = Field(description="The verdict in plain English")
    ratios: list[RatioOut] = Field(description="candidate / reference output tok/s per level")
    unmatched: list[int]
    crossover: dict[str, Any]
    behind_from: int | None
    ahead_from: int | None
    settled_conclusively: bool
    reference_saturation: dict[str, Any]
    candidate_saturation: dict[str, Any]
    saturation_ratio: float | None
    speculative: bool
    speculative_name: str
    disable_speculation_above: int | None
    engine_options: list[dict[str, Any]]


class ComparisonOut(Schema):
    version: int
    metric: str
    confidence: float
    reference: str | None
    series: list[dict[str, Any]]
    verdicts: list[VerdictOut]
    rows: list[dict[str, Any]]
    slo: dict[str, Any] | None = Field(None, description="The SLO the goodput figures use")
    goodput_verdicts: list[dict[str, Any]] = Field(
        default_factory=list, description="The verdicts on goodput tok/s under the SLO"
    )
    equivalence: dict[str, Any] | None
    warnings: list[str]
    built_at: str


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
    variants: list[dict[str, Any]] = Field(
        default_factory=list, description="Each arm's label, profile name and draft length"
    )
    bands: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Concurrency bands (start, end: inclusive, null = no upper end) with the "
        "arm and draft length chosen, the tested levels inside, expected_gain over the "
        "runner-up and its interval gain_low..gain_high (null without one)",
    )
    steps: list[dict[str, Any]] = Field(
        default_factory=list, description="Batch-size steps (start, end, draft_length)"
    )
    choices: list[dict[str, Any]] = Field(
        default_factory=list, description="Per tested level: the chosen arm and why"
    )
    untested: list[int] = Field(default_factory=list, description="Levels some arm did not test")
    description: str = ""
    configs: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The engine configuration to paste: engine, option, exact, value (argv), "
        "note, source, version, and file_name/file_text for a config file it names",
    )
