"""Jobs, server instances, their events and logs."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Field, Schema

from benchlib.json_types import JsonObject
from specdash.api.schemas.base import (
    MAX_ID,
    In,
    MaskedText,
    MaskedTree,
    Page,
    RunOut,
    UserName,
    url_resolver,
)

# -- jobs and instances -------------------------------------------------------------------


class WorkerOut(Schema):
    worker_id: str
    healthy: bool = Field(description="False while its loop fails (e.g. its writes refused)")
    error: str = Field(description="Why it is unhealthy (empty when healthy)")
    beat_at: datetime = Field(description="Its last beat")
    kinds: list[str] = Field(description="The job kinds it claims (empty: every kind)")


class HealthOut(Schema):
    ok: bool = Field(description="An alive, healthy job worker exists: new work is accepted")
    message: str
    stale_after_s: float = Field(description="A worker silent for longer no longer counts")
    workers: list[WorkerOut] = Field(description="The workers alive (beaten within that time)")


class JobOut(RunOut):
    id: int
    kind: str
    state: str
    finished: bool
    params: JsonObject
    result: JsonObject
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

    resolve_url = url_resolver("jobs")


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
    reason: MaskedText
    readiness: MaskedText = Field(
        description='What the start waited on at the last probe ("health /health answered '
        '503"); "" before the first probe, kept once the instance moved on'
    )
    evidence: MaskedTree
    stop_requested: bool
    started_by: UserName
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
    def resolve_active(obj: Any) -> bool:
        return bool(obj.is_active)

    resolve_url = url_resolver("instances")


class InstanceAccepted(Schema):
    instance: InstanceOut
    job: JobOut | None = Field(description="The job doing the work; poll its url")
    job_url: str | None


class InstanceEventOut(Schema):
    id: int
    at: datetime
    kind: str
    state: str
    message: MaskedText
    actor: UserName
    data: MaskedTree


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


class InstancePage(Page):
    items: list[InstanceOut]


class InstanceEventPage(Page):
    items: list[InstanceEventOut]


class JobPage(Page):
    items: list[JobOut]
