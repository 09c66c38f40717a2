"""What every router shares: pagination, time filters, path ids, documented responses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypedDict, TypeVar
from urllib.parse import urlencode

from django.core.exceptions import ValidationError
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from ninja import Field, Schema
from ninja.params.functions import Path

from specdash.api import errors
from specdash.api.schemas import MAX_ID, ErrorOut

if TYPE_CHECKING:
    from core.models import Job

M = TypeVar("M", bound=Model)
T = TypeVar("T")


class PageBody(TypedDict, Generic[M]):
    """One page of a list as a handler hands it to ninja (the ``*Page`` schemas render it)."""

    count: int
    limit: int
    offset: int
    next: str | None
    items: list[M]


MAX_LIMIT = 200
# Deep offsets are refused rather than turned into huge SQL OFFSETs.
MAX_OFFSET = 1_000_000


class PageQuery(Schema):
    limit: int = Field(50, ge=1, le=MAX_LIMIT, description=f"Items per page (1-{MAX_LIMIT})")
    offset: int = Field(0, ge=0, le=MAX_OFFSET, description="Items to skip")


def path_id(description: str) -> Any:
    return Path(..., ge=1, le=MAX_ID, description=description)


def paginate(request: HttpRequest, queryset: QuerySet[M], page: PageQuery) -> PageBody[M]:
    count = queryset.count()
    items = list(queryset[page.offset : page.offset + page.limit])
    next_path = None
    if page.offset + page.limit < count:
        query = request.GET.copy()
        query["offset"] = str(page.offset + page.limit)
        query["limit"] = str(page.limit)
        next_path = f"{request.path}?{urlencode(sorted(query.items()))}"
    return {
        "count": count,
        "limit": page.limit,
        "offset": page.offset,
        "next": next_path,
        "items": items,
    }


def aware(value: datetime | None, name: str) -> datetime | None:
    """A filter time in UTC (a time without an offset is taken as UTC)."""
    if value is None:
        return None
    try:
        if timezone.is_naive(value):
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise errors.ApiError(
            422, errors.VALIDATION, "The request is not valid.", {name: ["Time out of range."]}
        ) from None


class CreatedBounds(Protocol):
    """A list's filters that bound the creation time (every ``*Filters`` of a kept record)."""

    created_after: datetime | None
    created_before: datetime | None


class CreatedWindow(TypedDict):
    """The selectors' ``created_after`` / ``created_before`` keywords, in UTC."""

    created_after: datetime | None
    created_before: datetime | None


def created_window(filters: CreatedBounds) -> CreatedWindow:
    """The filters' creation bounds as the selectors take them (a bad time is a 422 naming
    the query parameter)."""
    return {
        "created_after": aware(filters.created_after, "query.created_after"),
        "created_before": aware(filters.created_before, "query.created_before"),
    }


def job_url(job: Job | None) -> str | None:
    """Where a 202 answer's client polls the job that does the work."""
    return f"/api/v1/jobs/{job.pk}" if job is not None else None


READ_ERRORS = (401, 403, 404, 422)
WRITE_ERRORS = (400, 401, 403, 404, 409, 422)


def responses(ok: dict[int, Any], errors_: tuple[int, ...] = READ_ERRORS) -> dict[int, Any]:
    """The operation's success schemas plus the error shape for every documented failure."""
    return {**ok, **dict.fromkeys(errors_, ErrorOut)}


def found(obj: T | None, message: str) -> T:
    """``obj``, or a 404 in the API's error shape saying what was not there (a selector's
    ``None`` turned into the answer, as ``get_object_or_404`` does for a queryset)."""
    if obj is None:
        raise errors.ApiError(404, errors.NOT_FOUND, message)
    return obj


def with_headline(exc: ValidationError) -> ValidationError:
    """The messages in the error's headline too, not only under its fields (a service's field
    errors, raised by a handler whose request has no form to show them beside)."""
    if not hasattr(exc, "error_dict"):
        return exc
    fields = dict(exc.message_dict)
    fields.setdefault("__all__", [" ".join(m for ms in fields.values() for m in ms)])
    return ValidationError(fields)


@contextmanager
def headlined_errors() -> Iterator[None]:
    """A service's ``ValidationError`` raised from the block, with its messages in the
    headline too (``with_headline``): for the handlers whose services name no request field."""
    try:
        yield
    except ValidationError as exc:
        raise with_headline(exc) from None
