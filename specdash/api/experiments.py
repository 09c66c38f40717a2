"""Experiments (profiles x levels, run unattended) and comparisons of any finished sweeps."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, TypeAlias

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest
from ninja import Field, FilterLookup, Query, Router, Schema
from ninja.responses import Status

from benchlib.json_types import JsonObject
from benchmarks.experiments import protocol, services, stored
from benchmarks.experiments import selectors as exp_selectors
from benchmarks.experiments.models import Experiment, ExperimentState
from hosts import selectors as host_selectors
from specdash.api import errors
from specdash.api.auth import caller, requires, sweeper, viewer
from specdash.api.common import (
    WRITE_ERRORS,
    ExperimentId,
    JobLink,
    ListFilters,
    found,
    job_link,
    paged,
    responses,
)
from specdash.api.schemas.base import Id, Text
from specdash.api.schemas.experiments import (
    ComparisonOut,
    ExperimentAccepted,
    ExperimentDetailOut,
    ExperimentIn,
    ExperimentPage,
    ScheduleOut,
)

if TYPE_CHECKING:
    from benchmarks.experiments.protocol import ProtocolReport

router = Router(tags=["experiments"])


class ExperimentAcceptedBody(JobLink):
    """The 202 answer to a write, as ``ExperimentAccepted`` renders it."""

    experiment: Experiment


_Accepted: TypeAlias = Status[ExperimentAcceptedBody]
_ACCEPTED = responses({202: ExperimentAccepted}, WRITE_ERRORS)


class ExperimentFilters(ListFilters):
    profile: Annotated[Id | None, FilterLookup("arms__profile_id")] = Field(
        None, description="Has an arm with this profile id"
    )
    state: ExperimentState | None = None
    tag: Text | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None

    def filter(self, queryset: QuerySet[Experiment]) -> QuerySet[Experiment]:  # type: ignore[override]
        # An experiment with two arms of the profile is listed once.
        filtered = super().filter(queryset)
        return filtered.distinct() if self.profile is not None else filtered


class ComparisonQuery(Schema):
    sweep: list[Id] = Field(
        min_length=2, max_length=8, description="Sweep ids, the first is the reference"
    )


def experiment_or_404(experiment_id: int) -> Experiment:
    return found(
        exp_selectors.experiment_detail(experiment_id=experiment_id),
        f"No experiment #{experiment_id}.",
    )


def experiment_accepted(experiment: Experiment) -> _Accepted:
    """202 with the experiment as stored now and the URL of its job."""
    experiment = experiment_or_404(experiment.pk)
    return Status(202, {"experiment": experiment, **job_link(experiment.job)})


def _act(request: HttpRequest, action: Callable[..., Experiment], experiment_id: int) -> _Accepted:
    """The 202 answer to ``action`` (a service taking the experiment and the user) on it."""
    return experiment_accepted(
        action(experiment=experiment_or_404(experiment_id), user=caller(request))
    )


@router.get("/experiments", response=responses({200: ExperimentPage}), summary="List experiments")
@requires(viewer)
@paged
def experiment_list(
    request: HttpRequest, filters: Query[ExperimentFilters]
) -> QuerySet[Experiment]:
    """Newest first; filter by profile, state, tag and creation time."""
    return filters.filter(exp_selectors.experiment_filter())


@router.post("/experiments", response=_ACCEPTED, summary="Start an A/B experiment")
@requires(sweeper)
def experiment_create(request: HttpRequest, payload: ExperimentIn) -> _Accepted:
    """Queue an experiment: for each profile (in order), start it, sweep it, stop it with a
    verified stop; then build the comparison. 202 with the experiment and its job."""
    user = caller(request)
    by_id = host_selectors.profiles_by_id(profile_ids=payload.profiles)
    missing = [pk for pk in payload.profiles if pk not in by_id]
    if missing:
        raise ValidationError({"profiles": [f"No profile #{pk}." for pk in missing]})
    experiment = services.experiment_create(
        profiles=[by_id[pk] for pk in payload.profiles], user=user, **payload.experiment_args()
    )
    return experiment_accepted(experiment)


@router.get("/experiments/{experiment_id}", response=responses({200: ExperimentDetailOut}))
@requires(viewer)
def experiment_detail(request: HttpRequest, experiment_id: ExperimentId) -> Experiment:
    """Status of an experiment and of each of its steps."""
    return experiment_or_404(experiment_id)


@router.post("/experiments/{experiment_id}/cancel", response=_ACCEPTED)
@requires(sweeper)
def experiment_cancel(request: HttpRequest, experiment_id: ExperimentId) -> _Accepted:
    """Cancel: the sweep in progress is cancelled and its server stopped (verified)."""
    return _act(request, services.experiment_cancel, experiment_id)


@router.post("/experiments/{experiment_id}/resume", response=_ACCEPTED)
@requires(sweeper)
def experiment_resume(request: HttpRequest, experiment_id: ExperimentId) -> _Accepted:
    """Resume an interrupted experiment from its first unfinished step and level (its server
    re-used when still ready and unchanged). 422 unless it is interrupted."""
    return _act(request, services.experiment_resume, experiment_id)


@router.post("/experiments/{experiment_id}/rerun", response=_ACCEPTED)
@requires(sweeper)
def experiment_rerun(request: HttpRequest, experiment_id: ExperimentId) -> _Accepted:
    """Retry a failed experiment, or re-run any finished one: a new experiment with the same
    profiles, levels, load and protocol (the original is kept). 422 while it runs."""
    return _act(request, services.experiment_rerun, experiment_id)


@router.get("/experiments/{experiment_id}/comparison", response=responses({200: ComparisonOut}))
@requires(viewer)
def experiment_comparison(
    request: HttpRequest, experiment_id: ExperimentId
) -> Mapping[str, object]:
    """The comparison with its verdicts: the stored one of a finished experiment, or one
    built now from the steps completed so far."""
    return stored.experiment_comparison_read(experiment=experiment_or_404(experiment_id))


class ProtocolOut(Schema):
    protocol: JsonObject = Field(
        description="repeats, order, mode, run_order, interval_method, interval_scope, metric, "
        "drift: {candidate label: [per level: arms' first/last runs, drift, order_effect]}"
    )
    environment_differences: dict[str, list[str]] = Field(
        description="Per arm, what differs from A's first run besides the launch"
    )
    runs: list[JsonObject] = Field(
        description="Each run (step, label, repeat, sweep_id) with its environment records"
    )


@router.get(
    "/experiments/{experiment_id}/protocol",
    response=responses({200: ProtocolOut}),
    summary="Protocol, drift and environment",
)
@requires(viewer)
def experiment_protocol(request: HttpRequest, experiment_id: ExperimentId) -> ProtocolReport:
    """How the experiment ran its arms (repeats, order, the interval and what it includes),
    each level's drift and order effect, and each run's environment record with what differs
    between the arms besides their launch (docs/measurement.md, "Protocols")."""
    return protocol.experiment_protocol_report(experiment=experiment_or_404(experiment_id))


@router.get(
    "/experiments/{experiment_id}/schedule",
    response=responses({200: ScheduleOut}),
    summary="Speculation schedule",
)
@requires(viewer)
def experiment_schedule(request: HttpRequest, experiment_id: ExperimentId) -> Mapping[str, object]:
    """The speculation schedule derived from the arms' stored levels: the draft length per
    concurrency band with each band's gain and interval, and the engine configuration to
    paste. ``available`` is false, with a message, when the arms' draft lengths cannot be
    read from their profiles' launch argv."""
    return stored.experiment_schedule_read(experiment=experiment_or_404(experiment_id))


@router.get("/comparisons", response=responses({200: ComparisonOut}), summary="Compare sweeps")
@requires(viewer)
def sweep_comparison(request: HttpRequest, query: Query[ComparisonQuery]) -> Mapping[str, object]:
    """Compare finished sweeps (``?sweep=A&sweep=B``), each against the first: ratios with
    intervals, crossover, saturation and the verdict, as for an experiment."""
    sweeps = exp_selectors.sweeps_by_ids(sweep_ids=query.sweep)
    missing = sorted(set(query.sweep) - {s.pk for s in sweeps})
    if missing:
        fields = {"query.sweep": [f"No sweep #{pk}." for pk in missing]}
        raise errors.ApiError(422, errors.VALIDATION, "Unknown sweep id(s).", fields)
    rate = exp_selectors.rate_sweep_ids(sweeps=sweeps)
    if rate:
        message = "Rate sweeps cannot be compared: comparisons pair levels by concurrency."
        fields = {"query.sweep": [f"Sweep #{pk} is a rate sweep." for pk in rate]}
        raise errors.ApiError(422, errors.VALIDATION, message, fields)
    return stored.sweeps_comparison_read(sweeps=sweeps)
