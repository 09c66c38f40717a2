"""Hosts, containers and server profiles."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from ninja import Field, Schema
from pydantic import StringConstraints

from hosts.models.registry import default_stop_grace_s
from specdash.api.schemas.base import (
    _TEXT,
    Id,
    In,
    MaskedArgv,
    MaskedEnv,
    Name,
    Page,
    Tag,
    Text,
    patch_of,
)

# -- registry -----------------------------------------------------------------------------


class HostOut(Schema):
    id: int
    name: str
    kind: str
    address: str
    ssh_user: str
    ssh_port: int
    identity_file: str
    known_hosts_policy: str
    known_hosts_file: str
    jump_host: str
    path_prepend: str
    command_env: MaskedEnv
    notes: str
    created_at: datetime
    updated_at: datetime


class HostIn(In):
    name: Name
    kind: str = "local"
    address: Annotated[str, StringConstraints(max_length=255, pattern=_TEXT)] = ""
    ssh_user: Annotated[str, StringConstraints(max_length=64, pattern=_TEXT)] = "root"
    ssh_port: int = Field(22, ge=1, le=65535)
    identity_file: Annotated[str, StringConstraints(max_length=500, pattern=_TEXT)] = ""
    known_hosts_policy: str = "strict"
    known_hosts_file: Annotated[str, StringConstraints(max_length=500, pattern=_TEXT)] = ""
    jump_host: Annotated[str, StringConstraints(max_length=255, pattern=_TEXT)] = ""
    path_prepend: Annotated[str, StringConstraints(max_length=1000, pattern=_TEXT)] = ""
    command_env: dict[Text, Text] = Field(default_factory=dict)
    notes: Text = ""


class ContainerOut(Schema):
    id: int
    host_id: int
    host: str
    kind: str
    ident: str
    label: str
    notes: str

    @staticmethod
    def resolve_host(obj: Any) -> str:
        return str(obj.host.name)


class ContainerIn(In):
    host_id: Id
    kind: str = "pct"
    ident: Annotated[str, StringConstraints(max_length=100, pattern=_TEXT)] = ""
    label: Annotated[str, StringConstraints(max_length=100, pattern=_TEXT)] = ""
    notes: Text = ""


# The PATCH bodies of hosts and containers, from their create bodies.
if TYPE_CHECKING:

    class HostPatch(In): ...

    class ContainerPatch(In): ...

else:
    HostPatch = patch_of(HostIn)
    ContainerPatch = patch_of(ContainerIn)


class ProfileOut(Schema):
    id: int
    name: str
    kind: str
    engine: str
    host_id: int | None
    host: str
    container_id: int | None
    launch_argv: MaskedArgv
    env: MaskedEnv
    workdir: str
    port: int
    gpu_ids: list[int]
    readiness_path: str
    readiness_status: int
    readiness_timeout_s: int
    stop_grace_s: int
    api_host: str
    openai_base_path: str
    served_model_name: str
    metrics_path: str
    base_url: str
    metrics_url: str
    api_kind: str
    speculative: bool
    tags: list[str]
    notes: str
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_host(obj: Any) -> str:
        return str(obj.host.name) if obj.host is not None else ""


_Path = Annotated[str, StringConstraints(max_length=200, pattern=_TEXT)]


_Url = Annotated[str, StringConstraints(max_length=300, pattern=_TEXT)]


class ProfileIn(In):
    name: Annotated[str, StringConstraints(min_length=1, max_length=120, pattern=_TEXT)]
    kind: str = Field(
        "managed", description="managed (specdash starts it) or endpoint (already running)"
    )
    engine: str = "sglang"
    host_id: Id | None = Field(None, description="Required for a managed profile")
    container_id: Id | None = None
    launch_argv: list[Text] = Field(
        default_factory=list, description="Required for a managed profile; none for an endpoint"
    )
    env: dict[Text, Text] = Field(default_factory=dict)
    workdir: Annotated[str, StringConstraints(max_length=500, pattern=_TEXT)] = ""
    port: int | None = Field(
        None, ge=1, le=65535, description="Required for a managed profile (an endpoint: its URL's)"
    )
    base_url: _Url = Field("", description="An endpoint's URL, e.g. http://10.0.0.5:30000")
    metrics_url: _Url = Field("", description="An endpoint's metrics (default: base URL /metrics)")
    api_kind: str = Field("", description="An endpoint's default API: completions, chat, generate")
    gpu_ids: list[Annotated[int, Field(ge=0, le=1023)]] = Field(default_factory=list)
    readiness_path: _Path = "/health"
    readiness_status: int = Field(200, ge=100, le=599)
    readiness_timeout_s: int = Field(600, ge=1, le=86_400)
    stop_grace_s: int = Field(default_factory=default_stop_grace_s, ge=0, le=3600)
    api_host: Annotated[str, StringConstraints(max_length=255, pattern=_TEXT)] = ""
    openai_base_path: _Path = "/v1"
    served_model_name: _Path = ""
    metrics_path: _Path = "/metrics"
    speculative: bool = False
    tags: list[Tag] = Field(default_factory=list)
    notes: Text = ""


# Written out, not patch_of(ProfileIn): the API document has always listed base_url,
# metrics_url and api_kind before launch_argv here (after port in ProfileIn), and a generated
# body would reorder the published schema.
class ProfilePatch(In):
    name: Annotated[str, StringConstraints(min_length=1, max_length=120, pattern=_TEXT)] | None = (
        None
    )
    kind: str | None = None
    engine: str | None = None
    host_id: Id | None = None
    container_id: Id | None = None
    base_url: _Url | None = None
    metrics_url: _Url | None = None
    api_kind: str | None = None
    launch_argv: list[Text] | None = None
    env: dict[Text, Text] | None = None
    workdir: Annotated[str, StringConstraints(max_length=500, pattern=_TEXT)] | None = None
    port: int | None = Field(None, ge=1, le=65535)
    gpu_ids: list[Annotated[int, Field(ge=0, le=1023)]] | None = None
    readiness_path: _Path | None = None
    readiness_status: int | None = Field(None, ge=100, le=599)
    readiness_timeout_s: int | None = Field(None, ge=1, le=86_400)
    stop_grace_s: int | None = Field(None, ge=0, le=3600)
    api_host: Annotated[str, StringConstraints(max_length=255, pattern=_TEXT)] | None = None
    openai_base_path: _Path | None = None
    served_model_name: _Path | None = None
    metrics_path: _Path | None = None
    speculative: bool | None = None
    tags: list[Tag] | None = None
    notes: Text | None = None


class HostPage(Page):
    items: list[HostOut]


class ContainerPage(Page):
    items: list[ContainerOut]


class ProfilePage(Page):
    items: list[ProfileOut]
