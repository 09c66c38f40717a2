"""API authentication: personal bearer tokens, or the browser's session with CSRF.

Authorisation is the UI's: the role checks of core.roles, declared on each handler with
``@requires(...)`` (as the HTML views declare theirs by decorator) and answering 403 in the
API's error shape. The services check again: this is the interface's check, not the only one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings
from django.http import HttpRequest
from ninja.operation import Operation
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf, contribute_operation_callback

from core import roles
from core.tokens import TokenRejected, api_token_authenticate
from specdash.api import errors


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        try:
            api_token = api_token_authenticate(raw=token)
        except TokenRejected as exc:
            # A token that was sent and refused is an answer, not a reason to try the session.
            raise errors.ApiError(401, exc.code, exc.message) from None
        request.user = api_token.user
        return api_token.user


class SessionWithCsrf(APIKeyCookie):
    """The logged-in browser user; unsafe methods need the CSRF token, as in the UI."""

    def __init__(self) -> None:
        self.param_name = settings.SESSION_COOKIE_NAME
        super().__init__(csrf=True)

    def _get_key(self, request: HttpRequest) -> str | None:
        # Anonymous callers get 401 rather than a CSRF 403: there is no session to protect.
        if not request.user.is_authenticated:
            return None
        if check_csrf(request) is not None:
            raise errors.ApiError(
                403, "csrf_failed", "CSRF check failed: send the X-CSRFToken header."
            )
        return request.COOKIES.get(self.param_name)

    def authenticate(self, request: HttpRequest, key: str | None) -> Any:
        return request.user if request.user.is_authenticated else None


def api_auth() -> list[Any]:
    return [BearerToken(), SessionWithCsrf()]


def _require(request: HttpRequest, allowed: bool, what: str) -> Any:
    if not allowed:
        raise errors.ApiError(403, errors.PERMISSION_DENIED, f"Your role does not allow {what}.")
    return request.auth  # type: ignore[attr-defined]


def viewer(request: HttpRequest) -> Any:
    return _require(request, roles.can_view(request.auth), "reading this")  # type: ignore[attr-defined]


def operator(request: HttpRequest) -> Any:
    return _require(request, roles.can_operate(request.auth), "starting or stopping servers")  # type: ignore[attr-defined]


def sweeper(request: HttpRequest) -> Any:
    return _require(request, roles.can_run_sweeps(request.auth), "running sweeps or experiments")  # type: ignore[attr-defined]


def _staff_with(request: HttpRequest, permission: str) -> Any:
    user = request.auth  # type: ignore[attr-defined]
    allowed = bool(user.is_staff and user.has_perm(permission))
    return _require(request, allowed, "changing the registry (staff only)")


RoleCheck = Callable[[HttpRequest], Any]
F = TypeVar("F", bound=Callable[..., Any])


def staff(permission: str) -> RoleCheck:
    """The check for a registry write: staff holding ``permission``."""
    return functools.partial(_staff_with, permission=permission)


def requires(*checks: RoleCheck) -> Callable[[F], F]:
    """Run ``checks`` in order before the handler, each answering 403 when the caller's role
    falls short. Place it under the ``@router`` line.

    The check wraps the operation's call of the handler, after ninja has parsed the request,
    exactly where a check in the handler's first line ran: a body error from a caller whose
    role allows no such request still answers 403 (errors.on_ninja_validation), and the
    handler's own signature, which ninja reads, is left untouched."""

    def mark(view_func: F) -> F:
        def wrap(operation: Operation) -> None:
            handler = operation.view_func

            @functools.wraps(handler)
            def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                for check in checks:
                    check(request)
                return handler(request, *args, **kwargs)

            operation.view_func = checked

        contribute_operation_callback(view_func, wrap)
        return view_func

    return mark


def caller(request: HttpRequest) -> Any:
    """The authenticated user (token owner or session user), once ``requires`` has passed."""
    return request.auth  # type: ignore[attr-defined]
