"""Sweeps, their load settings (generated from the one model), levels and samples."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

from ninja import Field, Schema
from pydantic import StringConstraints, create_model

from benchlib.json_types import JsonObject
from benchlib.loadgen.settings import LoadSettings, input_fields
from benchlib.loadgen.settings_fields import SloSettings
from benchmarks.sweeps import selectors as bench_selectors
from benchmarks.sweeps.rows import LevelRow, SweepProgress
from specdash.api.schemas.base import (
    _TEXT,
    Id,
    In,
    MaskedTree,
    Notes,
    Page,
    RunOut,
    Tag,
    Title,
    UserName,
    url_resolver,
)
from specdash.api.schemas.jobs import JobOut

# -- sweeps -------------------------------------------------------------------------------


# The load settings' request bodies, from the one model (benchlib.loadgen.settings): every
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
    profile_id: Id | None = Field(
        None, description="Or an endpoint profile (a registered server specdash did not start)"
    )
    levels: list[int] = Field(min_length=1, max_length=64, description="Concurrency levels")
    load: SweepLoadIn = Field(default_factory=lambda: SweepLoadIn.model_validate({}))
    name: Title = ""
    notes: Notes = ""
    tags: list[Tag] = Field(default_factory=list, max_length=50)


class ProgressOut(Schema):
    level_number: int
    level_count: int
    finished_levels: int
    eta_s: float | None


class SweepOut(RunOut):
    id: int
    name: str
    state: str
    finished: bool
    instance_id: int | None
    profile_id: int | None
    profile: str | None
    base_url: str
    levels: list[int]
    load: JsonObject
    reason: str
    current_level_index: int | None
    notes: str
    tags: list[str]
    created_by: UserName
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    job_id: int | None
    url: str

    @staticmethod
    def resolve_profile(obj: Any) -> str | None:
        return obj.profile.name if obj.profile is not None else None

    resolve_url = url_resolver("sweeps")


class SweepDetailOut(SweepOut):
    environment: MaskedTree
    progress: ProgressOut

    @staticmethod
    def resolve_progress(obj: Any) -> SweepProgress:
        levels = bench_selectors.sweep_levels(sweep_id=obj.pk)
        return bench_selectors.sweep_progress(sweep=obj, levels=levels)


class SweepAccepted(Schema):
    sweep: SweepOut
    job: JobOut | None
    job_url: str | None


# The headline figures a level shares with the page's level row are declared once, in
# benchmarks.sweeps.rows.LevelRow: the schema takes their names and types from it, in its order,
# and adds the descriptions the API documents. Left out: the row's place on the page's curve
# (x, label) and its times, which the API gives as datetimes rather than epoch seconds.
_LEVEL_ROW_NOT_IN_API = frozenset({"x", "label", "started_at", "finished_at"})
_LEVEL_ROW_DESCRIPTIONS = {
    "concurrency": "The level's C (in a rate sweep: the in-flight cap)",
    "target_rate": "The offered request rate of an open-loop level (req/s; null: closed loop)",
}


def _level_row_fields() -> dict[str, tuple[object, object]]:
    hints = get_type_hints(LevelRow)
    return {
        name: (kind, Field(description=_LEVEL_ROW_DESCRIPTIONS[name]))
        if name in _LEVEL_ROW_DESCRIPTIONS
        else (kind, ...)
        for name, kind in hints.items()
        if name not in _LEVEL_ROW_NOT_IN_API
    }


if TYPE_CHECKING:

    class _LevelRowOut(Schema): ...

else:
    _LevelRowOut = create_model("_LevelRowOut", __base__=Schema, **_level_row_fields())


class LevelOut(_LevelRowOut):
    attempt: int = Field(description="The sweep attempt whose records this level summarises")
    earlier_attempts: list[JsonObject] = Field(
        description="What earlier attempts of this level measured before it was run again"
    )
    started_at: datetime | None
    finished_at: datetime | None
    summary: JsonObject
    server_metrics: JsonObject = Field(
        description="The server's own figures over exactly this level (available false when "
        "not scraped), from /metrics counter differences (docs/measurement.md): accept_length "
        "per drafted step and tokens_per_step per engine step, each with its *_source "
        "(counters: 1 + accepted/drafts; "
        "verify_counters: (generation - requests) / verify calls; itl_counters: (generation - "
        "requests) / ITL count; gauge: the engine's own gauge, its window, not the level; "
        "not_determinable: accept_length null, accept_length_note says why, e.g. SGLang with "
        "--speculative-adaptive, whose 0-step tiers count as verify calls); "
        "latencies ttft_s / itl_s / e2e_s in seconds, itl_unit saying what one ITL sample is "
        "(engine_step for vLLM: one per verify step under speculation; token for SGLang; "
        "request_tpot for SGLang's time_per_output_token_seconds fallback: one per request), "
        "itl_histogram the histogram read, and "
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
    data: JsonObject


class SweepPage(Page):
    items: list[SweepOut]


class SamplePage(Page):
    items: list[SampleOut]
