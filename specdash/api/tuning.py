"""Parameter matrices (variants of one profile run as an experiment) and the verification of
a speculation schedule derived from one (benchmarks.experiments.matrix and .tuning)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from django.db import transaction
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.responses import Status

from benchlib.json_types import JsonObject
from benchmarks.experiments import tuning
from specdash.api.auth import caller, operator, requires, sweeper, viewer
from specdash.api.common import WRITE_ERRORS, ExperimentId, headlined_errors, responses
from specdash.api.experiments import experiment_accepted, experiment_or_404
from specdash.api.hosts import profile_or_404
from specdash.api.schemas.base import Id, In
from specdash.api.schemas.experiments import ExperimentAccepted, ProtocolIn

if TYPE_CHECKING:
    from specdash.api.experiments import ExperimentAcceptedBody

router = Router(tags=["experiments"])


class MatrixIn(ProtocolIn):
    profile: Id = Field(description="The base profile whose argv the axes change")
    axes: JsonObject = Field(
        description='Flag -> values, e.g. {"--speculative-num-steps": [1, 3, 5]}; a key inside '
        'a JSON flag as {"--speculative-config.num_speculative_tokens": [1, 3]}; several axes '
        "give their product"
    )
    include_off: bool = Field(False, description="Add a variant with speculation off (arm A)")
    auto_resume: bool = False


class VerifyIn(In):
    repeats: int | None = Field(
        None,
        ge=1,
        le=10,
        description=f"Sweeps per arm; default {tuning.VERIFY_REPEATS}, or the matrix "
        "experiment's repeats when more",
    )


class RatioOut(Schema):
    point: float
    low: float | None
    high: float | None
    method: str


class PredictedOut(Schema):
    concurrency: int
    fixed: str = Field(description="The fixed variant the prediction is against")
    ratio: float = Field(description="Predicted schedule / fixed")
    cause: str


class VerificationLevelOut(Schema):
    concurrency: int
    tuned: float
    best_fixed: str
    best_fixed_value: float
    ratio: RatioOut = Field(description="tuned / best fixed variant, with its interval")
    conclusively_worse_than: list[str]
    behind_within_margin: list[str]
    undecided: list[str] = Field(
        description="'variant: reason' where the pair is inconclusive or not comparable"
    )
    ok: bool
    predicted: PredictedOut | None = Field(
        None,
        description="What the schedule's decision predicted here before the run (a switch "
        "point's cost to the level above it); null where it predicted none",
    )


class VerificationQuery(Schema):
    margin: float = Field(
        tuning.DEFAULT_MARGIN,
        ge=0.0,
        lt=0.5,
        description="Practical-equivalence margin: a fixed variant is ahead only when "
        "schedule / fixed lies wholly below 1 and not inside 1 +/- margin (default 0: the "
        "verification's repeats put the run-to-run spread in the intervals)",
    )


class VerificationOut(Schema):
    experiment_id: int
    state: str
    tuned: str
    fixed: list[str]
    confidence: float
    margin: float
    levels: list[VerificationLevelOut]
    ok: bool
    verdict: str = Field(description="The verification decision's sentence, margin stated")
    decision: JsonObject | None = Field(
        None,
        description="The verification decision: `pairwise` (the schedule against each fixed "
        "variant, each a decision with per-level status, ratio and interval), `levels`, "
        "`statements`",
    )


@router.post(
    "/experiments/matrix",
    response=responses({202: ExperimentAccepted}, WRITE_ERRORS),
    summary="Run a parameter matrix of one profile",
)
@requires(operator, sweeper)
def matrix_create(request: HttpRequest, payload: MatrixIn) -> Status[ExperimentAcceptedBody]:
    """Create (or reuse) one variant profile per combination of the axes' values, and queue
    an experiment with the variants as arms. 422 for an axis that cannot be applied."""
    user = caller(request)
    base = profile_or_404(payload.profile)
    with headlined_errors():
        experiment = tuning.matrix_create(
            base=base,
            axes=payload.axes,
            include_off=payload.include_off,
            auto_resume=payload.auto_resume,
            user=user,
            **payload.protocol_args(),
        )
    return experiment_accepted(experiment)


@router.post(
    "/experiments/{experiment_id}/verify",
    response=responses({202: ExperimentAccepted}, WRITE_ERRORS),
    summary="Verify the speculation schedule of a matrix experiment",
)
@requires(operator, sweeper)
def verification_create(
    request: HttpRequest,
    experiment_id: ExperimentId,
    payload: VerifyIn | None = None,
) -> Status[ExperimentAcceptedBody]:
    """Derive the schedule from a completed experiment whose arms differ in draft length, write
    it as a tuned profile, and queue [tuned, every fixed variant] on the same levels and load,
    each level ``repeats`` times (default 3) so the verdict's intervals hold run-to-run spread.
    The body may be empty."""
    user = caller(request)
    repeats = payload.repeats if payload is not None else None
    with headlined_errors(), transaction.atomic():
        experiment = tuning.verification_create(
            experiment=experiment_or_404(experiment_id), repeats=repeats, user=user
        )
    return experiment_accepted(experiment)


@router.get(
    "/experiments/{experiment_id}/verification",
    response=responses({200: VerificationOut}),
    summary="Tuned schedule vs every fixed variant, per level",
)
@requires(viewer)
def verification_report(
    request: HttpRequest,
    query: Query[VerificationQuery],
    experiment_id: ExperimentId,
) -> Mapping[str, object]:
    """Per level: tuned / best fixed variant with its interval, the fixed variants
    conclusively ahead of the schedule, and the verdict."""
    with headlined_errors():
        return tuning.verification_report(
            experiment=experiment_or_404(experiment_id), margin=query.margin
        )
