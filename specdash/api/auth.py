"""API authentication: personal bearer tokens, or the browser's session with CSRF.

Authorisation is the UI's: the role checks of core.roles, applied by each handler through
the ``require_*`` helpers below, answering 403 in the API's error shape.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest
from ninja.security import APIKeyCookie, HttpBearer
from ninja.utils import check_csrf

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


def require_viewer(request: HttpRequest) -> Any:
    return _require(request, roles.can_view(request.auth), "reading this")  # type: ignore[attr-defined]


def require_operator(request: HttpRequest) -> Any:
    return _require(request, roles.can_operate(request.auth), "starting or stopping servers")  # type: ignore[attr-defined]


def require_sweeper(request: HttpRequest) -> Any:
    return _require(request, roles.can_run_sweeps(request.auth), "running sweeps or experiments")  # type: ignore[attr-defined]


def require_staff(request: HttpRequest, permission: str) -> Any:
    user = request.auth  # type: ignore[attr-defined]
    allowed = bool(user.is_staff and user.has_perm(permission))
    return _require(request, allowed, "changing the registry (staff only)")
