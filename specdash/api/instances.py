"""Server instances: start a profile, stop, status, state history, log tail."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, TypeAlias, TypedDict

from django.db.models import QuerySet
from django.http import HttpRequest
from ninja import Field, FilterLookup, Query, Router, Schema
from ninja.responses import Status

from core.jobs import selectors as job_selectors
from hosts import selectors as host_selectors
from hosts import services
from hosts.models import InstanceState, ServerInstance
from specdash.api import errors
from specdash.api.auth import caller, operator, requires, viewer
from specdash.api.common import (
    WRITE_ERRORS,
    InstanceId,
    JobLink,
    ListFilters,
    ProfileId,
    found,
    job_link,
    paged,
    responses,
)
from specdash.api.hosts import profile_or_404
from specdash.api.schemas.base import Id, Text
from specdash.api.schemas.jobs import (
    InstanceAccepted,
    InstanceEventPage,
    InstanceOut,
    InstancePage,
    KillHoldersIn,
    LogOut,
)

if TYPE_CHECKING:
    from hosts.models import InstanceEvent

router = Router(tags=["instances"])


class InstanceAcceptedBody(JobLink):
    """The 202 answer to a write, as ``InstanceAccepted`` renders it."""

    instance: ServerInstance


_Accepted: TypeAlias = Status[InstanceAcceptedBody]
_ACCEPTED = responses({202: InstanceAccepted}, WRITE_ERRORS)


class InstanceLogBody(TypedDict):
    """The answer ``LogOut`` renders."""

    instance_id: int
    state: str
    lines: list[str]


class InstanceFilters(ListFilters):
    tag_field = "profile__tags"

    profile: Annotated[Id | None, FilterLookup("profile_id")] = Field(
        None, description="Profile id"
    )
    host: Annotated[Id | None, FilterLookup("host_id")] = Field(None, description="Host id")
    state: InstanceState | None = None
    tag: Text | None = Field(None, description="A tag of the instance's profile")
    created_after: datetime | None = None
    created_before: datetime | None = None


class LogQuery(Schema):
    lines: int = Field(200, ge=1, le=10_000, description="How many of the last lines")


def _instance(instance_id: int) -> ServerInstance:
    return found(
        host_selectors.instance_detail(instance_id=instance_id),
        f"No server instance #{instance_id}.",
    )


def _accepted(instance: ServerInstance) -> _Accepted:
    instance = _instance(instance.pk)
    job = job_selectors.job_newest(lock_key=services.instance_lock_key(instance.pk))
    return Status(202, {"instance": instance, **job_link(job)})


@router.get("/instances", response=responses({200: InstancePage}), summary="List instances")
@requires(viewer)
@paged
def instance_list(
    request: HttpRequest, filters: Query[InstanceFilters]
) -> QuerySet[ServerInstance]:
    """Newest first; filter by profile, host, state, profile tag and creation time."""
    return filters.filter(host_selectors.instance_filter())


@router.post(
    "/profiles/{profile_id}/start", response=_ACCEPTED, summary="Start a server from a profile"
)
@requires(operator)
def profile_start(request: HttpRequest, profile_id: ProfileId) -> _Accepted:
    """202 with the new instance (``starting``) and its job; 409 when the port or a GPU is
    held by another instance on the host. Poll the instance until ``ready``."""
    profile = profile_or_404(profile_id)
    return _accepted(services.instance_start(profile=profile, user=caller(request)))


@router.get("/instances/{instance_id}", response=responses({200: InstanceOut}))
@requires(viewer)
def instance_detail(request: HttpRequest, instance_id: InstanceId) -> ServerInstance:
    """Status of one instance."""
    return _instance(instance_id)


@router.post("/instances/{instance_id}/stop", response=_ACCEPTED)
@requires(operator)
def instance_stop(request: HttpRequest, instance_id: InstanceId) -> _Accepted:
    """Ask for a targeted, verified stop; the instance ends ``stopped`` (or ``dirty``)."""
    return _accepted(services.instance_stop(instance=_instance(instance_id), user=caller(request)))


@router.post("/instances/{instance_id}/kill-holders", response=_ACCEPTED)
@requires(operator)
def instance_kill_holders(
    request: HttpRequest, payload: KillHoldersIn, instance_id: InstanceId
) -> _Accepted:
    """Kill exactly the listed GPU holders of a ``dirty`` instance (only processes its
    verification listed, by pid and start time)."""
    user = caller(request)
    instance = _instance(instance_id)
    holders = [h.model_dump() for h in payload.holders]
    try:
        killing = services.instance_kill_holders(
            instance=instance, holders=holders, confirmed=payload.confirm, user=user
        )
    except services.KillNotConfirmed:
        fields = {"body.confirm": ["Confirm the kill with true."]}
        raise errors.ApiError(422, errors.VALIDATION, "The request is not valid.", fields) from None
    except services.HoldersNotListed as exc:
        fields = {"body.holders": [str(exc)]}
        raise errors.ApiError(422, errors.VALIDATION, "The request is not valid.", fields) from None
    return _accepted(killing)


@router.get("/instances/{instance_id}/events", response=responses({200: InstanceEventPage}))
@requires(viewer)
@paged
def instance_events(request: HttpRequest, instance_id: InstanceId) -> QuerySet[InstanceEvent]:
    """State history and operator actions, oldest first."""
    return host_selectors.instance_event_list(instance_id=_instance(instance_id).pk)


@router.get("/instances/{instance_id}/log", response=responses({200: LogOut}))
@requires(viewer)
def instance_log(
    request: HttpRequest, query: Query[LogQuery], instance_id: InstanceId
) -> InstanceLogBody:
    """The last lines of the server's log, as the lifecycle job last read them."""
    instance = _instance(instance_id)
    lines = host_selectors.instance_log_lines(instance, last=query.lines)
    return {"instance_id": instance.pk, "state": instance.state, "lines": lines}
