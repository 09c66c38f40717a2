"""Break-even maps (benchmarks.experiments.breakeven): create one, read it with a placed
workload and its checks, and queue the check of a placed prediction."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.responses import Status

from benchlib.json_types import JsonObject
from benchmarks.experiments import breakeven, breakeven_report
from specdash.api.auth import caller, operator, requires, sweeper, viewer
from specdash.api.common import WRITE_ERRORS, MapId, found, headlined_errors, responses
from specdash.api.experiments import experiment_accepted, experiment_or_404
from specdash.api.hosts import profile_or_404
from specdash.api.schemas.base import Id, In
from specdash.api.schemas.experiments import ExperimentAccepted, ProtocolIn

if TYPE_CHECKING:
    from benchmarks.experiments.breakeven_report import MapPayload
    from specdash.api.experiments import ExperimentAcceptedBody

router = Router(tags=["experiments"])


class MapIn(ProtocolIn):
    profile: Id = Field(description="The speculative profile whose acceptance is forced")
    acceptances: list[float] = Field(
        min_length=2, max_length=12, description="Forced accept lengths (tokens per verify step)"
    )


class SourceQuery(Schema):
    experiment: int | None = Field(None, ge=1, description="Place this experiment's workload")
    sweep: int | None = Field(None, ge=1, description="Or this sweep's")


class CheckIn(In):
    category: str = Field(max_length=40, description="The placed category to run alone")
    experiment: int | None = Field(None, ge=1, description="The placed experiment")
    sweep: int | None = Field(None, ge=1, description="Or the placed sweep")


class CheckAccepted(Schema):
    check_id: int
    verification_id: int


class CheckAcceptedBody(TypedDict):
    """The 202 answer ``CheckAccepted`` renders."""

    check_id: int
    verification_id: int


def _map(experiment_id: int) -> breakeven.MapData:
    return found(
        breakeven.experiment_map(experiment=experiment_or_404(experiment_id)),
        f"Experiment #{experiment_id} has no break-even map (yet).",
    )


@router.post(
    "/experiments/breakeven",
    response=responses({202: ExperimentAccepted}, WRITE_ERRORS),
    summary="Run a break-even map: forced acceptance x levels against speculation off",
)
@requires(operator, sweeper)
def map_create(request: HttpRequest, payload: MapIn) -> Status[ExperimentAcceptedBody]:
    """One arm per forced accept length and one with speculation off (arm A), default
    protocol; 422 for an engine without a way to force the acceptance."""
    user = caller(request)
    base = profile_or_404(payload.profile)
    with headlined_errors():
        experiment = breakeven.map_create(
            base=base,
            acceptances=payload.acceptances,
            user=user,
            **payload.protocol_args(),
        )
    return experiment_accepted(experiment)


@router.get(
    "/experiments/{experiment_id}/breakeven",
    # The map's payload (breakeven_report.map_payload) is documented in docs/api.md.
    response=responses({200: JsonObject}),
    summary="A break-even map, a placed workload and the map's checks",
)
@requires(viewer)
def map_read(
    request: HttpRequest,
    query: Query[SourceQuery],
    experiment_id: MapId,
) -> MapPayload:
    """The map's cells (B/A, interval, the decision's status), its contour and band; with
    ?experiment= or ?sweep=, that workload's categories placed on it; every check."""
    data = _map(experiment_id)
    placement = None
    if query.experiment is not None or query.sweep is not None:
        with headlined_errors():
            placement = breakeven.placement_source(
                data=data, experiment_id=query.experiment, sweep_id=query.sweep
            )
    checks = breakeven.map_checks(experiment=data.experiment)
    return breakeven_report.map_payload(data.bmap, placement, checks)


@router.post(
    "/experiments/{experiment_id}/breakeven/checks",
    response=responses({202: CheckAccepted}, WRITE_ERRORS),
    summary="Verify a placed prediction: the real A/B of one category",
)
@requires(operator, sweeper)
def check_create(
    request: HttpRequest, payload: CheckIn, experiment_id: MapId
) -> Status[CheckAcceptedBody]:
    user = caller(request)
    data = _map(experiment_id)
    with headlined_errors():
        placement = breakeven.placement_source(
            data=data, experiment_id=payload.experiment, sweep_id=payload.sweep
        )
        check = breakeven.check_create(
            data=data, placement=placement, category=payload.category, user=user
        )
    return Status(202, {"check_id": check.pk, "verification_id": check.verification_id})
