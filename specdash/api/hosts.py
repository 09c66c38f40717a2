"""Registry endpoints: hosts, containers and server profiles (read: viewers; write: staff)."""

from __future__ import annotations

from typing import Annotated

from django.db.models import QuerySet
from django.http import HttpRequest
from ninja import FilterLookup, Query, Router, Schema
from ninja.responses import Status

from benchlib.json_types import JsonObject
from hosts import selectors as host_selectors
from hosts import services
from hosts.models import Container, Host, ServerProfile
from specdash.api.auth import requires, staff, viewer
from specdash.api.common import (
    WRITE_ERRORS,
    ContainerId,
    HostId,
    ListFilters,
    ProfileId,
    found,
    paged,
    responses,
)
from specdash.api.schemas.base import Id, Text
from specdash.api.schemas.registry import (
    ContainerIn,
    ContainerOut,
    ContainerPage,
    ContainerPatch,
    HostIn,
    HostOut,
    HostPage,
    HostPatch,
    ProfileIn,
    ProfileOut,
    ProfilePage,
    ProfilePatch,
)

router = Router(tags=["registry"])


class ContainerFilters(ListFilters):
    host: Annotated[Id | None, FilterLookup("host_id")] = None


class ProfileFilters(ListFilters):
    host: Annotated[Id | None, FilterLookup("host_id")] = None
    tag: Text | None = None


def _changes(payload: Schema) -> JsonObject:
    return payload.model_dump(exclude_unset=True)


def _host(host_id: int) -> Host:
    return found(host_selectors.host_detail(host_id=host_id), f"No host #{host_id}.")


def _container(container_id: int) -> Container:
    return found(
        host_selectors.container_detail(container_id=container_id),
        f"No container #{container_id}.",
    )


def profile_or_404(profile_id: int) -> ServerProfile:
    """The profile at ``profile_id`` (a registry page, a start, a matrix's or a map's base)."""
    return found(host_selectors.profile_detail(profile_id=profile_id), f"No profile #{profile_id}.")


@router.get("/hosts", response=responses({200: HostPage}), summary="List hosts")
@requires(viewer)
@paged
def host_list(request: HttpRequest) -> QuerySet[Host]:
    return host_selectors.host_list()


@router.post("/hosts", response=responses({201: HostOut}, WRITE_ERRORS), summary="Create a host")
@requires(staff("hosts.add_host"))
def host_create(request: HttpRequest, payload: HostIn) -> Status[Host]:
    return Status(201, services.registry_create(model=Host, data=payload.model_dump()))


@router.get("/hosts/{host_id}", response=responses({200: HostOut}), summary="One host")
@requires(viewer)
def host_detail(request: HttpRequest, host_id: HostId) -> Host:
    return _host(host_id)


@router.patch("/hosts/{host_id}", response=responses({200: HostOut}, WRITE_ERRORS))
@requires(staff("hosts.change_host"))
def host_update(request: HttpRequest, payload: HostPatch, host_id: HostId) -> Host:
    """Change the given fields of a host (staff)."""
    return services.registry_update(obj=_host(host_id), data=_changes(payload))


@router.get("/containers", response=responses({200: ContainerPage}), summary="List containers")
@requires(viewer)
@paged
def container_list(request: HttpRequest, filters: Query[ContainerFilters]) -> QuerySet[Container]:
    return filters.filter(host_selectors.container_list())


@router.post("/containers", response=responses({201: ContainerOut}, WRITE_ERRORS))
@requires(staff("hosts.add_container"))
def container_create(request: HttpRequest, payload: ContainerIn) -> Status[Container]:
    """Register a container on a host (staff)."""
    return Status(201, services.registry_create(model=Container, data=payload.model_dump()))


@router.get("/containers/{container_id}", response=responses({200: ContainerOut}))
@requires(viewer)
def container_detail(request: HttpRequest, container_id: ContainerId) -> Container:
    """One container."""
    return _container(container_id)


@router.patch("/containers/{container_id}", response=responses({200: ContainerOut}, WRITE_ERRORS))
@requires(staff("hosts.change_container"))
def container_update(
    request: HttpRequest, payload: ContainerPatch, container_id: ContainerId
) -> Container:
    """Change the given fields of a container (staff)."""
    return services.registry_update(obj=_container(container_id), data=_changes(payload))


@router.get("/profiles", response=responses({200: ProfilePage}), summary="List server profiles")
@requires(viewer)
@paged
def profile_list(request: HttpRequest, filters: Query[ProfileFilters]) -> QuerySet[ServerProfile]:
    return filters.filter(host_selectors.profile_list())


@router.post("/profiles", response=responses({201: ProfileOut}, WRITE_ERRORS))
@requires(staff("hosts.add_serverprofile"))
def profile_create(request: HttpRequest, payload: ProfileIn) -> Status[ServerProfile]:
    """Create a server profile (staff)."""
    # Unset optionals (an endpoint's host and port) take the model's defaults.
    data = payload.model_dump(exclude_none=True)
    return Status(201, services.registry_create(model=ServerProfile, data=data))


@router.get("/profiles/{profile_id}", response=responses({200: ProfileOut}))
@requires(viewer)
def profile_detail(request: HttpRequest, profile_id: ProfileId) -> ServerProfile:
    """One server profile."""
    return profile_or_404(profile_id)


@router.patch("/profiles/{profile_id}", response=responses({200: ProfileOut}, WRITE_ERRORS))
@requires(staff("hosts.change_serverprofile"))
def profile_update(
    request: HttpRequest, payload: ProfilePatch, profile_id: ProfileId
) -> ServerProfile:
    """Change the given fields of a profile (staff); a running instance keeps its launch."""
    return services.registry_update(obj=profile_or_404(profile_id), data=_changes(payload))
