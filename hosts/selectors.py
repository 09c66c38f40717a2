"""Read-side queries for hosts, profiles and instances.

The instance rows built here (``InstanceRow``, ``InstanceEventRow``) are also the payloads of
the instance events (hosts.channel), so a snapshot and the live events that follow it have the
same shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypedDict

from django.db.models import Count, Prefetch, QuerySet

from benchlib.json_types import JsonObject
from hosts.masking import masked_text, masked_tree
from hosts.models import Container, Host, InstanceEvent, ProfileKind, ServerInstance, ServerProfile
from hosts.models.instances import ACTIVE_STATES, HOLDING_STATES


class DashboardOverview(TypedDict):
    """The dashboard page's context: every host, the base profiles (with their variant
    counts) and the instances that hold a GPU."""

    hosts: list[Host]
    profiles: list[ServerProfile]
    running_instances: list[ServerInstance]


def dashboard_overview() -> DashboardOverview:
    return {
        "hosts": list(Host.objects.prefetch_related("containers")),
        # Base profiles only; a matrix's variants are counted under their base.
        "profiles": list(
            ServerProfile.objects.filter(variant_of__isnull=True)
            .select_related("host", "container")
            .annotate(variant_count=Count("variants"))
        ),
        "running_instances": list(
            ServerInstance.objects.filter(state__in=sorted(HOLDING_STATES)).select_related(
                "profile", "host"
            )
        ),
    }


def instance_list() -> QuerySet[ServerInstance]:
    return ServerInstance.objects.select_related("profile", "host", "started_by")


def profiles_with_active_instance() -> list[ServerProfile]:
    """The base profiles (not a matrix's variants), each with its holding instances in
    ``active_instances`` and its variants, with theirs, in ``variant_list``."""
    active = ServerInstance.objects.filter(state__in=sorted(HOLDING_STATES))
    with_active = Prefetch("instances", queryset=active, to_attr="active_instances")
    variants = ServerProfile.objects.select_related("host", "container").prefetch_related(
        with_active
    )
    return list(
        ServerProfile.objects.filter(variant_of__isnull=True, kind=ProfileKind.MANAGED)
        .select_related("host", "container")
        .prefetch_related(
            with_active, Prefetch("variants", queryset=variants, to_attr="variant_list")
        )
    )


def endpoint_profiles() -> QuerySet[ServerProfile]:
    """Servers running outside specdash, registered by URL (listed apart: no instances)."""
    return ServerProfile.objects.filter(kind=ProfileKind.ENDPOINT).select_related("host")


def instance_detail(*, instance_id: int) -> ServerInstance | None:
    return (
        ServerInstance.objects.select_related("profile", "host", "profile__container", "started_by")
        .filter(pk=instance_id)
        .first()
    )


def host_detail(*, host_id: int) -> Host | None:
    return Host.objects.filter(pk=host_id).first()


def container_detail(*, container_id: int) -> Container | None:
    return Container.objects.select_related("host").filter(pk=container_id).first()


def profile_detail(*, profile_id: int) -> ServerProfile | None:
    return ServerProfile.objects.select_related("host").filter(pk=profile_id).first()


def profiles_by_id(*, profile_ids: Iterable[int]) -> dict[int, ServerProfile]:
    """The profiles among ``profile_ids`` that exist, by id (a caller names the missing)."""
    return {p.pk: p for p in ServerProfile.objects.filter(pk__in=list(profile_ids))}


def host_list() -> QuerySet[Host]:
    return Host.objects.order_by("name", "pk")


def container_list() -> QuerySet[Container]:
    return Container.objects.select_related("host").order_by("host__name", "ident", "pk")


def profile_list() -> QuerySet[ServerProfile]:
    return ServerProfile.objects.select_related("host").order_by("name", "pk")


def instance_filter() -> QuerySet[ServerInstance]:
    """Instances, newest first, for the API's list (its FilterSchema narrows them)."""
    return instance_list().order_by("-created_at", "-pk")


def instance_event_list(*, instance_id: int) -> QuerySet[InstanceEvent]:
    """An instance's events as a queryset (to page through); ``instance_events`` lists them."""
    return InstanceEvent.objects.filter(instance_id=instance_id).select_related("actor")


def instance_events(*, instance_id: int) -> list[InstanceEvent]:
    return list(InstanceEvent.objects.filter(instance_id=instance_id).select_related("actor"))


class InstanceSnapshot(TypedDict):
    """What an instance page's websocket client gets first."""

    instance: InstanceRow
    events: list[InstanceEventRow]
    log_tail: str


def instance_snapshot(*, instance_id: int) -> InstanceSnapshot | None:
    """What a websocket client gets first: the instance's current state and history."""
    instance = instance_detail(instance_id=instance_id)
    if instance is None:
        return None
    return {
        "instance": instance_as_dict(instance),
        "events": [event_as_dict(e) for e in instance_events(instance_id=instance_id)],
        "log_tail": masked_text(instance.log_tail),
    }


def instance_log_lines(instance: ServerInstance, *, last: int) -> list[str]:
    """The last ``last`` lines of the server's log, as the lifecycle job last read them, with
    the secrets a server prints (SGLang logs its ServerArgs, api_key included) masked."""
    return masked_text(instance.log_tail).splitlines()[-last:]


class InstanceRow(TypedDict):
    id: int
    profile: str
    profile_id: int
    host: str
    state: str
    state_label: str
    active: bool
    port: int
    gpu_ids: list[int]
    pid: int | None
    exit_code: int | None
    reason: str
    readiness: str  # the last stage of the wait for readiness ("" before the first probe)
    # Free-form: what the lifecycle found (process, port, GPUs) when it judged a stop or a
    # crash, and the GPUs' memory before launch, each as its own step recorded it.
    evidence: JsonObject
    baseline_gpu_memory: JsonObject
    created_at: str | None  # ISO 8601
    ready_at: str | None
    stopped_at: str | None


class InstanceEventRow(TypedDict):
    id: int
    at: str  # ISO 8601
    kind: str
    state: str
    message: str
    actor: str | None  # the username, None for the system
    data: JsonObject  # free-form: whatever the step that recorded the event attached


def instance_as_dict(instance: ServerInstance) -> InstanceRow:
    return {
        "id": instance.pk,
        "profile": instance.profile.name,
        "profile_id": instance.profile_id,
        "host": instance.host.name,
        "state": instance.state,
        "state_label": instance.get_state_display(),
        "active": instance.state in ACTIVE_STATES,
        "port": instance.port,
        "gpu_ids": instance.gpu_ids,
        "pid": instance.pid,
        "exit_code": instance.exit_code,
        # Masked as the page and the API mask them: a viewer's socket gets this row too.
        "reason": masked_text(instance.reason),
        "readiness": masked_text(instance.readiness),
        "evidence": masked_tree(instance.evidence),
        "baseline_gpu_memory": instance.baseline_gpu_memory,
        "created_at": instance.created_at.isoformat() if instance.created_at else None,
        "ready_at": instance.ready_at.isoformat() if instance.ready_at else None,
        "stopped_at": instance.stopped_at.isoformat() if instance.stopped_at else None,
    }


def event_as_dict(event: InstanceEvent) -> InstanceEventRow:
    return {
        "id": event.pk,
        "at": event.at.isoformat(),
        "kind": event.kind,
        "state": event.state,
        "message": masked_text(event.message),
        "actor": event.actor.get_username() if event.actor else None,
        "data": masked_tree(event.data),
    }
