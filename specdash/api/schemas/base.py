"""What every body shares: ids, text without control characters, the strict input base,
the output types that mask secrets or name a user, the error shape and the page envelope."""

from __future__ import annotations

from typing import Annotated, Any

from ninja import Field, Schema
from pydantic import AfterValidator, BeforeValidator, ConfigDict, StringConstraints, create_model

from benchlib.json_types import JsonObject
from hosts.masking import masked_argv, masked_env, masked_text, masked_tree

# Database ids are 64-bit; a larger number can only be a miss, and must not overflow SQL.
MAX_ID = 2**63 - 1
Id = Annotated[int, Field(ge=1, le=MAX_ID)]
# No NUL or other control characters (PostgreSQL refuses NUL in text).
_TEXT = r"^[^\x00-\x08\x0b\x0c\x0e-\x1f]*$"
Text = Annotated[str, StringConstraints(pattern=_TEXT)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=_TEXT)]
# A run's optional title, its notes and one of its tags (sweeps, experiments, profiles).
Title = Annotated[str, StringConstraints(max_length=200, pattern=_TEXT)]
Notes = Annotated[str, StringConstraints(max_length=10_000, pattern=_TEXT)]
Tag = Annotated[str, StringConstraints(max_length=50, pattern=_TEXT)]


class In(Schema):
    model_config = ConfigDict(extra="forbid")


def patch_of(body: type[In]) -> type[In]:
    """The PATCH body of a create body (``HostIn`` -> ``HostPatch``): each of its fields with
    the same type and bounds, optional and null by default, so that a handler changes only
    the fields sent (``model_dump(exclude_unset=True)``) and a new field is patchable at once.
    Descriptions and defaults are the create body's alone."""
    fields: dict[str, Any] = {}
    for name, info in body.model_fields.items():
        kind: Any = info.annotation
        if info.metadata:
            kind = Annotated[(kind, *info.metadata)]
        fields[name] = (kind | None, None)
    patch: type[In] = create_model(
        body.__name__.removesuffix("In") + "Patch",
        __base__=In,
        __module__=body.__module__,
        **fields,
    )
    return patch


def username(user: Any) -> str | None:
    """Who a row names (its creator, its actor), by username; None when nobody (a job's)."""
    return user.get_username() if user is not None else None


def _masked_tree(tree: Any) -> JsonObject:
    # An environment snapshot taken before argv was masked still holds its secrets; a row
    # written before the snapshot existed has none (null).
    return dict(masked_tree(tree or {}))


def _masked_env(env: Any) -> JsonObject:
    return masked_env(dict(env))


def _masked_argv(argv: Any) -> list[str]:
    return masked_argv(list(argv))


# Output field types, each converting the model's value on its way out: a user as its
# username, and the secrets hidden (hosts.masking) in free text, a JSON tree (an event's data,
# a verification's evidence: holders' command lines are other processes' argv), an
# environment and a launch argv. The OpenAPI document shows the plain type.
UserName = Annotated[str | None, BeforeValidator(username)]
MaskedText = Annotated[str, AfterValidator(masked_text)]
MaskedTree = Annotated[JsonObject, BeforeValidator(_masked_tree)]
MaskedEnv = Annotated[JsonObject, BeforeValidator(_masked_env)]
MaskedArgv = Annotated[list[str], BeforeValidator(_masked_argv)]


def api_url(collection: str, pk: int) -> str:
    """Where the API serves an object: its collection's path and its id."""
    return f"/api/v1/{collection}/{pk}"


def url_resolver(collection: str) -> staticmethod[[Any], str]:
    """The resolver of an output's ``url`` (``api_url`` of the object)."""

    def resolve_url(obj: Any) -> str:
        return api_url(collection, obj.pk)

    return staticmethod(resolve_url)


class RunOut(Schema):
    """The resolver the outputs of a run (a job, a sweep, an experiment) share; each output
    declares its own fields, in its own order."""

    @staticmethod
    def resolve_finished(obj: Any) -> bool:
        return bool(obj.is_finished)


# -- errors -------------------------------------------------------------------------------


class ErrorDetail(Schema):
    code: str = Field(description="Stable machine-readable code, e.g. validation_error")
    message: str
    fields: dict[str, list[str]] = Field(
        default_factory=dict, description="Per-field messages (validation errors only)"
    )


class ErrorOut(Schema):
    error: ErrorDetail


# -- pages --------------------------------------------------------------------------------


class Page(Schema):
    count: int = Field(description="Items matching the filters, over all pages")
    limit: int
    offset: int
    next: str | None = Field(description="Path of the next page, null on the last")
