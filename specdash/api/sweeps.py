"""Sweeps: create, status, per-level results, samples, cancel, exports."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, TypeAlias

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Field, FilterLookup, Query, Router
from ninja.responses import Status

from benchmarks.sweeps import exports, services
from benchmarks.sweeps import selectors as bench_selectors
from benchmarks.sweeps.models import Sweep, SweepState
from hosts import selectors as host_selectors
from specdash.api import errors
from specdash.api.auth import caller, requires, sweeper, viewer
from specdash.api.common import (
    WRITE_ERRORS,
    JobLink,
    ListFilters,
    SweepId,
    found,
    job_link,
    paged,
    responses,
)
from specdash.api.schemas.base import Id, Text
from specdash.api.schemas.sweeps import (
    LevelOut,
    SamplePage,
    SweepAccepted,
    SweepDetailOut,
    SweepIn,
    SweepPage,
)

if TYPE_CHECKING:
    from benchmarks.sweeps.models import SweepSample

router = Router(tags=["sweeps"])


class SweepAcceptedBody(JobLink):
    """The 202 answer to a write, as ``SweepAccepted`` renders it."""

    sweep: Sweep


_Accepted: TypeAlias = Status[SweepAcceptedBody]
_ACCEPTED = responses({202: SweepAccepted}, WRITE_ERRORS)


class SweepFilters(ListFilters):
    profile: Annotated[Id | None, FilterLookup("profile_id")] = Field(
        None, description="Profile id"
    )
    instance: Annotated[Id | None, FilterLookup("instance_id")] = Field(
        None, description="Instance id"
    )
    state: SweepState | None = None
    tag: Text | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


class SampleFilters(ListFilters):
    level: Annotated[int | None, FilterLookup("level_index")] = Field(
        None, ge=0, le=1024, description="Level index"
    )


def _sweep(sweep_id: int) -> Sweep:
    return found(bench_selectors.sweep_detail(sweep_id=sweep_id), f"No sweep #{sweep_id}.")


def _accepted(sweep: Sweep) -> _Accepted:
    sweep = _sweep(sweep.pk)
    return Status(202, {"sweep": sweep, **job_link(sweep.job)})


def _act(request: HttpRequest, action: Callable[..., Sweep], sweep_id: int) -> _Accepted:
    """The 202 answer to ``action`` (a service taking the sweep and the user) on the sweep."""
    return _accepted(action(sweep=_sweep(sweep_id), user=caller(request)))


_CSV = {
    200: {"description": "Level summaries", "content": {"text/csv": {"schema": {"type": "string"}}}}
}
_JSON_FILE = {
    200: {
        "description": "The sweep, its load and environment, every level with its summary",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}
_JSONL = {
    200: {
        "description": "One JSON object per request (the load generator's records)",
        "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
    }
}


@router.get("/sweeps", response=responses({200: SweepPage}), summary="List sweeps")
@requires(viewer)
@paged
def sweep_list(request: HttpRequest, filters: Query[SweepFilters]) -> QuerySet[Sweep]:
    """Newest first; filter by profile, instance, state, tag and creation time."""
    return filters.filter(bench_selectors.sweep_filter())


@router.post("/sweeps", response=_ACCEPTED, summary="Start a concurrency sweep")
@requires(sweeper)
def sweep_create(request: HttpRequest, payload: SweepIn) -> _Accepted:
    """Queue a sweep of a ready instance (or a base URL); 202 with the sweep and its job."""
    user = caller(request)
    instance = None
    if payload.instance_id is not None:
        instance = host_selectors.instance_detail(instance_id=payload.instance_id)
        if instance is None:
            raise ValidationError({"instance_id": f"No server instance #{payload.instance_id}."})
    endpoint = None
    if payload.profile_id is not None:
        endpoint = host_selectors.profile_detail(profile_id=payload.profile_id)
        if endpoint is None:
            raise ValidationError({"profile_id": f"No server profile #{payload.profile_id}."})
    try:
        sweep = services.sweep_create(
            instance=instance,
            base_url=payload.base_url,
            endpoint=endpoint,
            levels=payload.levels,
            load=payload.load.model_dump(exclude_none=True),
            name=payload.name,
            notes=payload.notes,
            tags=payload.tags,
            user=user,
        )
    except ValidationError as exc:
        # The service names the model field; clients sent instance_id.
        if hasattr(exc, "error_dict") and "instance" in exc.error_dict:
            exc.error_dict["instance_id"] = exc.error_dict.pop("instance")
        if hasattr(exc, "error_dict") and "endpoint" in exc.error_dict:
            exc.error_dict["profile_id"] = exc.error_dict.pop("endpoint")
        raise
    return _accepted(sweep)


@router.get("/sweeps/{sweep_id}", response=responses({200: SweepDetailOut}))
@requires(viewer)
def sweep_detail(request: HttpRequest, sweep_id: SweepId) -> Sweep:
    """Status and progress of one sweep."""
    return _sweep(sweep_id)


@router.get("/sweeps/{sweep_id}/levels", response=responses({200: list[LevelOut]}))
@requires(viewer)
def sweep_levels(request: HttpRequest, sweep_id: SweepId) -> list[Any]:
    """Per-level results (headline figures and the full summary), by level index."""
    return bench_selectors.sweep_levels(sweep_id=_sweep(sweep_id).pk)


@router.get("/sweeps/{sweep_id}/samples", response=responses({200: SamplePage}))
@requires(viewer)
@paged
def sweep_samples(
    request: HttpRequest, filters: Query[SampleFilters], sweep_id: SweepId
) -> QuerySet[SweepSample]:
    """The live samples (about one a second), oldest first."""
    return filters.filter(bench_selectors.sweep_sample_list(sweep_id=_sweep(sweep_id).pk))


@router.post("/sweeps/{sweep_id}/cancel", response=_ACCEPTED)
@requires(sweeper)
def sweep_cancel(request: HttpRequest, sweep_id: SweepId) -> _Accepted:
    """Cancel: a queued sweep at once, a running one after its current level (partial)."""
    return _act(request, services.sweep_cancel, sweep_id)


@router.post("/sweeps/{sweep_id}/resume", response=_ACCEPTED)
@requires(sweeper)
def sweep_resume(request: HttpRequest, sweep_id: SweepId) -> _Accepted:
    """Continue an interrupted sweep from its first level that did not complete."""
    return _act(request, services.sweep_resume, sweep_id)


@router.post("/sweeps/{sweep_id}/rerun", response=_ACCEPTED)
@requires(sweeper)
def sweep_rerun(request: HttpRequest, sweep_id: SweepId) -> _Accepted:
    """A new sweep with a finished sweep's settings against the same target (its server if
    still ready, else a ready server of its profile; its endpoint or base URL). 422 while it
    runs or when no server of its profile is ready."""
    return _act(request, services.sweep_rerun, sweep_id)


@router.post("/sweeps/{sweep_id}/abandon", response=_ACCEPTED)
@requires(sweeper)
def sweep_abandon(request: HttpRequest, sweep_id: SweepId) -> _Accepted:
    """Close an interrupted sweep for good (cancelled, every level kept)."""
    return _act(request, services.sweep_abandon, sweep_id)


@router.get(
    "/sweeps/{sweep_id}/levels.csv",
    response=responses({}),
    openapi_extra={"responses": _CSV},
)
@requires(viewer)
def sweep_export_csv(request: HttpRequest, sweep_id: SweepId) -> HttpResponse:
    """Level summaries as CSV (the columns of the UI's export)."""
    return exports.levels_csv_response(sweep=_sweep(sweep_id))


@router.get(
    "/sweeps/{sweep_id}/levels.json",
    response=responses({}),
    openapi_extra={"responses": _JSON_FILE},
)
@requires(viewer)
def sweep_export_json(request: HttpRequest, sweep_id: SweepId) -> HttpResponse:
    """The sweep with its load, environment and every level's full summary."""
    return exports.levels_json_response(sweep=_sweep(sweep_id))


@router.get(
    "/sweeps/{sweep_id}/records.jsonl",
    response=responses({}),
    openapi_extra={"responses": _JSONL},
)
@requires(viewer)
def sweep_export_records(request: HttpRequest, sweep_id: SweepId) -> StreamingHttpResponse:
    """Every request's record as JSON lines (404 until the sweep has written some)."""
    response = exports.records_response(request=request, sweep=_sweep(sweep_id))
    if response is None:
        raise errors.ApiError(404, errors.NOT_FOUND, "This sweep has no request records yet.")
    return response
