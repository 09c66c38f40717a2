"""What every router shares: pagination, list filters, path ids, documented responses."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeAlias, TypedDict, TypeVar
from urllib.parse import urlencode

from django.core.exceptions import ValidationError
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from ninja import Field, FilterSchema, P, PathEx, Schema
from ninja.pagination import PaginationBase, paginate
from ninja.signature.utils import make_forwardref

from core.listing import tag_q
from specdash.api import errors
from specdash.api.schemas.base import MAX_ID, ErrorOut, api_url

if TYPE_CHECKING:
    from core.models import Job

M = TypeVar("M", bound=Model)
T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


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


class OffsetPagination(PaginationBase):
    """ninja's ``@paginate`` in the API's page shape: ``limit`` / ``offset`` in, the envelope
    ``{count, limit, offset, next, items}`` out, ``next`` the path of the following page with
    the request's other query parameters kept.

    ``Output`` is unset on purpose: ninja would otherwise rename each list's response schema
    to ``Paged<Item>``; the operations keep declaring their own ``*Page`` schema (base.Page
    plus the item type), so the OpenAPI document and its schema names stay as they were."""

    # Named PageQuery (not the nested ``Input`` ninja's own paginators declare): the name the
    # OpenAPI document has always given the page parameters.
    Input = PageQuery  # type: ignore[assignment]
    Output = None  # type: ignore[assignment]

    def paginate_queryset(
        self, queryset: QuerySet[M], pagination: PageQuery, request: HttpRequest, **params: Any
    ) -> PageBody[M]:
        count = queryset.count()
        end = pagination.offset + pagination.limit
        items = list(queryset[pagination.offset : end])
        next_path = None
        if end < count:
            query = request.GET.copy()
            query["offset"] = str(end)
            query["limit"] = str(pagination.limit)
            next_path = f"{request.path}?{urlencode(sorted(query.items()))}"
        return {
            "count": count,
            "limit": pagination.limit,
            "offset": pagination.offset,
            "next": next_path,
            "items": items,
        }


def paged(handler: F) -> F:
    """A list handler that returns its queryset, answered one page at a time (place it under
    ``@requires``)."""
    # ninja reads the parameters' annotations (strings, under ``from __future__ import
    # annotations``) in the module of the function it is given: here, paginate's wrapper, where
    # the handler's names (its filter schema) are unknown. Resolve them where they are written.
    handler.__annotations__ = {
        name: make_forwardref(kind, handler.__globals__)
        if isinstance(kind, str) and name != "return"
        else kind
        for name, kind in handler.__annotations__.items()
    }
    paginated: F = paginate(OffsetPagination)(handler)
    return paginated


def _path_id(description: str) -> dict[str, object]:
    return P(ge=1, le=MAX_ID, description=description)


# The ids in the paths, each with the description the OpenAPI document gives it (a number
# larger than a 64-bit id can only be a miss: 404 without reaching SQL).
ContainerId: TypeAlias = PathEx[int, _path_id("Container id")]
ExperimentId: TypeAlias = PathEx[int, _path_id("Experiment id")]
HostId: TypeAlias = PathEx[int, _path_id("Host id")]
InstanceId: TypeAlias = PathEx[int, _path_id("Instance id")]
JobId: TypeAlias = PathEx[int, _path_id("Job id")]
MapId: TypeAlias = PathEx[int, _path_id("Map experiment id")]
ProfileId: TypeAlias = PathEx[int, _path_id("Profile id")]
SweepId: TypeAlias = PathEx[int, _path_id("Sweep id")]


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


class ListFilters(FilterSchema):
    """ninja's filter schema for the API's lists: each field a lookup on the queryset its
    list's selector returns (``FilterLookup`` naming the column where it is not the field's
    name), and the lookups every run-like list shares declared once below. A field left out
    of the query (None) filters nothing, and neither does an empty text field.

    The fields themselves stay in each list's class, in the order the OpenAPI document lists
    them."""

    # Where a list's ``tag`` looks (an instance: its profile's tags).
    tag_field: ClassVar[str] = "tags"

    def filter_tag(self, tag: str | None) -> Q:
        return tag_q(self.tag_field, tag) if tag else Q()

    def filter_created_after(self, value: datetime | None) -> Q:
        return Q(created_at__gte=aware(value, "query.created_after"))

    def filter_created_before(self, value: datetime | None) -> Q:
        return Q(created_at__lt=aware(value, "query.created_before"))


class JobLink(TypedDict):
    """What every 202 answer carries beside the object it accepted (``*AcceptedBody`` adds
    that object under its own name): the job doing the work, and where to poll it."""

    job: Job | None
    job_url: str | None


def job_link(job: Job | None) -> JobLink:
    return {"job": job, "job_url": api_url("jobs", job.pk) if job is not None else None}


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
