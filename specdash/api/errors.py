"""One error shape for every API failure: ``{"error": {"code", "message", "fields"}}``.

Handlers raise ``ApiError`` (or a Django/ninja/service exception mapped here); nothing a
client sends can turn into a 500, because every rejection has a mapping below.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from django.core.exceptions import ObjectDoesNotExist, PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DatabaseError, InternalError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from core import roles
from core.jobs.health import WorkerUnavailable
from hosts.services import InvalidTransition, ServerConflict
from specdash.limits import too_large_response

if TYPE_CHECKING:
    from ninja import NinjaAPI

logger = logging.getLogger(__name__)

# Codes clients can branch on (documented in docs/api.md).
BAD_REQUEST = "bad_request"  # e.g. a body that is not JSON
VALIDATION = "validation_error"
NOT_AUTHENTICATED = "not_authenticated"
PERMISSION_DENIED = "permission_denied"
NOT_FOUND = "not_found"
CONFLICT = "conflict"
INVALID_STATE = "invalid_state"
SERVER_ERROR = "server_error"
WORKER_UNAVAILABLE = "worker_unavailable"  # no healthy job worker: new work refused
DATABASE_UNAVAILABLE = "database_unavailable"  # the database refused the request


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        fields: dict[str, list[str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.fields = fields or {}


class ErrorDetail(TypedDict):
    code: str
    message: str
    fields: dict[str, list[str]]


class ErrorBody(TypedDict):
    """Every error the API answers, as ``ErrorOut`` documents it."""

    error: ErrorDetail


def error_body(code: str, message: str, fields: dict[str, list[str]] | None = None) -> ErrorBody:
    return {"error": {"code": code, "message": message, "fields": fields or {}}}


def _ninja_fields(errors: Sequence[Mapping[str, object]]) -> dict[str, list[str]]:
    """Per-field messages from ninja's (pydantic's) error list: ``loc`` and ``msg`` of each."""
    fields: dict[str, list[str]] = {}
    for item in errors:
        # loc is (source, [param name,] field, ...): keep "body.levels.0", "query.limit".
        where = item.get("loc", ())
        loc = [str(part) for part in where] if isinstance(where, Iterable) else [str(where)]
        if len(loc) > 2 and loc[0] == "body":
            loc = [loc[0], *loc[2:]]
        key = ".".join(loc) or "__all__"
        fields.setdefault(key, []).append(str(item.get("msg", "invalid")))
    return fields


def _django_fields(exc: DjangoValidationError) -> tuple[str, dict[str, list[str]]]:
    if hasattr(exc, "error_dict"):
        fields = {key: [str(m) for m in messages] for key, messages in exc.message_dict.items()}
        general = fields.pop("__all__", [])
        return (" ".join(general) or "The request is not valid."), fields
    return " ".join(str(m) for m in exc.messages) or "The request is not valid.", {}


_NO_ROLE = "Your role does not allow this."
_SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def _role_may_try(request: HttpRequest) -> bool:
    """Whether the caller holds a role that some operation of this kind needs: a viewer for a
    read, an operator, a sweeper or staff for a write (every write needs one of these)."""
    user: Any = getattr(request, "auth", None)
    if not roles.can_view(user):
        return False
    if request.method in _SAFE_METHODS:
        return True
    return roles.can_operate(user) or roles.can_run_sweeps(user) or bool(user.is_staff)


def install(api: NinjaAPI) -> None:
    """Register the mappings on ``api`` (replacing ninja's ``{"detail": ...}`` bodies)."""

    def respond(request: HttpRequest, status: int, body: ErrorBody) -> HttpResponse:
        return api.create_response(request, body, status=status)

    def on_api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
        return respond(request, exc.status, error_body(exc.code, exc.message, exc.fields))

    def on_ninja_validation(request: HttpRequest, exc: NinjaValidationError) -> HttpResponse:
        # The body is parsed before the handler checks the role: a caller whose role allows
        # no such request gets the 403 it would have got, not the field names of a 422.
        if not _role_may_try(request):
            return respond(request, 403, error_body(PERMISSION_DENIED, _NO_ROLE))
        body = error_body(VALIDATION, "The request is not valid.", _ninja_fields(exc.errors))
        return respond(request, 422, body)

    def on_too_large(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
        return too_large_response(request)

    def on_django_validation(request: HttpRequest, exc: DjangoValidationError) -> HttpResponse:
        message, fields = _django_fields(exc)
        return respond(request, 422, error_body(VALIDATION, message, fields))

    def on_authentication(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
        message = "Send 'Authorization: Bearer <token>' or log in."
        response = respond(request, 401, error_body(NOT_AUTHENTICATED, message))
        response["WWW-Authenticate"] = "Bearer"
        return response

    def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
        codes = {400: BAD_REQUEST, 401: NOT_AUTHENTICATED, 403: PERMISSION_DENIED, 404: NOT_FOUND}
        return respond(
            request, exc.status_code, error_body(codes.get(exc.status_code, "error"), str(exc))
        )

    def on_permission(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
        message = str(exc) or "Your role does not allow this."
        return respond(request, 403, error_body(PERMISSION_DENIED, message))

    def on_not_found(request: HttpRequest, exc: Exception) -> HttpResponse:
        return respond(request, 404, error_body(NOT_FOUND, str(exc) or "Not found."))

    def on_conflict(request: HttpRequest, exc: ServerConflict) -> HttpResponse:
        return respond(request, 409, error_body(CONFLICT, str(exc)))

    def on_invalid_transition(request: HttpRequest, exc: InvalidTransition) -> HttpResponse:
        return respond(request, 409, error_body(INVALID_STATE, str(exc)))

    def on_worker_unavailable(request: HttpRequest, exc: WorkerUnavailable) -> HttpResponse:
        message = " ".join(exc.messages)
        return respond(request, 503, error_body(WORKER_UNAVAILABLE, message))

    def on_database(request: HttpRequest, exc: DatabaseError) -> HttpResponse:
        # Not a bug in the request: the database is full, locked, read-only or gone (an
        # IntegrityError, say, is not among these: it stays a 500, a bug).
        logger.error("API request %s %s: the database refused it: %s", request.method,
                     request.path, exc)  # fmt: skip
        message = f"The database refused the request ({exc}); try again once it recovers."
        return respond(request, 503, error_body(DATABASE_UNAVAILABLE, message))

    def on_unexpected(request: HttpRequest, exc: Exception) -> HttpResponse:
        # A bug, not bad input: logged with its traceback, answered in the same shape.
        logger.exception("API request %s %s failed", request.method, request.path)
        return respond(
            request, 500, error_body(SERVER_ERROR, "Internal error; see the server log.")
        )

    def add(
        exc_class: type[Exception], handler: Callable[[HttpRequest, Any], HttpResponse]
    ) -> None:
        api.add_exception_handler(exc_class, handler)

    add(ApiError, on_api_error)
    add(NinjaValidationError, on_ninja_validation)
    add(RequestDataTooBig, on_too_large)
    add(DjangoValidationError, on_django_validation)
    add(AuthenticationError, on_authentication)
    add(HttpError, on_http_error)
    add(PermissionDenied, on_permission)
    add(Http404, on_not_found)
    add(ObjectDoesNotExist, on_not_found)
    add(ServerConflict, on_conflict)
    add(InvalidTransition, on_invalid_transition)
    add(WorkerUnavailable, on_worker_unavailable)
    add(OperationalError, on_database)  # SQLite: locked, full, read-only; lost connections
    add(InternalError, on_database)  # PostgreSQL: a read-only transaction
    add(Exception, on_unexpected)
