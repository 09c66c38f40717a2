"""What every body shares: ids, text without control characters, the strict input base,
the error shape and the page envelope."""

from __future__ import annotations

from typing import Annotated, Any

from ninja import Field, Schema
from pydantic import ConfigDict, StringConstraints

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


def username(user: Any) -> str | None:
    """Who a row names (its creator, its actor), by username; None when nobody (a job's)."""
    return user.get_username() if user is not None else None


class RunOut(Schema):
    """The resolvers the outputs of a run (a job, a sweep, an experiment) share; each output
    declares its own fields, in its own order, and gets these for those it has."""

    @staticmethod
    def resolve_finished(obj: Any) -> bool:
        return bool(obj.is_finished)

    @staticmethod
    def resolve_created_by(obj: Any) -> str | None:
        return username(obj.created_by)


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
