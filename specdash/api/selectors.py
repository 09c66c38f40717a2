"""Filtered lists for the API, over the apps' own selectors."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TypeVar

from django.db import connection
from django.db.models import Model, Q, QuerySet

from benchmarks import selectors as bench_selectors
from benchmarks.models import Experiment, Sweep, SweepSample
from core.models import Job
from hosts import selectors as host_selectors
from hosts.models import Container, Host, InstanceEvent, ServerInstance, ServerProfile
from hosts.services import instance_lock_key

M = TypeVar("M", bound=Model)


def tag_q(field: str, tag: str) -> Q:
    """Rows whose JSON list ``field`` holds ``tag``."""
    if connection.vendor == "postgresql":
        return Q(**{f"{field}__contains": [tag]})
    # SQLite has no JSON containment lookup: match the element's JSON text, quotes included,
    # so "base" does not match "baseline". Tags are short lists, so this stays cheap.
    return Q(**{f"{field}__icontains": json.dumps(tag)})


def _common_filters(
    qs: QuerySet[M],
    *,
    state: str | None,
    tag_field: str,
    tag: str | None,
    created_after: datetime | None,
    created_before: datetime | None,
) -> QuerySet[M]:
    """The filters every run-like list shares: state, a tag, and a creation-time window."""
    if state:
        qs = qs.filter(state=state)
    if tag:
        qs = qs.filter(tag_q(tag_field, tag))
    if created_after is not None:
        qs = qs.filter(created_at__gte=created_after)
    if created_before is not None:
        qs = qs.filter(created_at__lt=created_before)
    return qs


def hosts() -> QuerySet[Host]:
    return Host.objects.order_by("name", "pk")


def containers(*, host_id: int | None = None) -> QuerySet[Container]:
    qs = Container.objects.select_related("host").order_by("host__name", "ident", "pk")
    return qs.filter(host_id=host_id) if host_id is not None else qs


def profiles(*, host_id: int | None = None, tag: str | None = None) -> QuerySet[ServerProfile]:
    qs = ServerProfile.objects.select_related("host").order_by("name", "pk")
    if host_id is not None:
        qs = qs.filter(host_id=host_id)
    if tag:
        qs = qs.filter(tag_q("tags", tag))
    return qs


def instances(
    *,
    profile_id: int | None = None,
    host_id: int | None = None,
    state: str | None = None,
    tag: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
) -> QuerySet[ServerInstance]:
    qs = host_selectors.instance_list().order_by("-created_at", "-pk")
    if profile_id is not None:
        qs = qs.filter(profile_id=profile_id)
    if host_id is not None:
        qs = qs.filter(host_id=host_id)
    return _common_filters(
        qs,
        state=state,
        tag_field="profile__tags",
        tag=tag,
        created_after=created_after,
        created_before=created_before,
    )


def instance_events(*, instance_id: int) -> QuerySet[InstanceEvent]:
    return InstanceEvent.objects.filter(instance_id=instance_id).select_related("actor")


def instance_job(*, instance_id: int) -> Job | None:
    """The newest job driving an instance (its run job, or the stop job of an orphan)."""
    return (
        Job.objects.filter(lock_key=instance_lock_key(instance_id))
        .order_by("-created_at", "-pk")
        .first()
    )


def sweeps(
    *,
    profile_id: int | None = None,
    instance_id: int | None = None,
    state: str | None = None,
    tag: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
) -> QuerySet[Sweep]:
    qs = bench_selectors.sweep_list().select_related("created_by").order_by("-created_at", "-pk")
    if profile_id is not None:
        qs = qs.filter(profile_id=profile_id)
    if instance_id is not None:
        qs = qs.filter(instance_id=instance_id)
    return _common_filters(
        qs,
        state=state,
        tag_field="tags",
        tag=tag,
        created_after=created_after,
        created_before=created_before,
    )


def sweep_samples(*, sweep_id: int, level_index: int | None = None) -> QuerySet[SweepSample]:
    qs = SweepSample.objects.filter(sweep_id=sweep_id).order_by("t", "pk")
    return qs.filter(level_index=level_index) if level_index is not None else qs


def jobs(*, kind: str | None = None, state: str | None = None) -> QuerySet[Job]:
    qs = Job.objects.order_by("-created_at", "-pk")
    if kind:
        qs = qs.filter(kind=kind)
    if state:
        qs = qs.filter(state=state)
    return qs


def experiments(
    *,
    profile_id: int | None = None,
    state: str | None = None,
    tag: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
) -> QuerySet[Experiment]:
    qs = (
        bench_selectors.experiment_list()
        .select_related("created_by")
        .order_by("-created_at", "-pk")
    )
    if profile_id is not None:
        qs = qs.filter(arms__profile_id=profile_id).distinct()
    return _common_filters(
        qs,
        state=state,
        tag_field="tags",
        tag=tag,
        created_after=created_after,
        created_before=created_before,
    )
