"""Interactive API docs (Swagger UI) with every asset served from the pinned django-ninja
package by this app: no CDN, so the docs work on an air-gapped dashboard."""

from __future__ import annotations

import json
import mimetypes
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ninja
from django.contrib.auth.decorators import login_not_required
from django.contrib.auth.views import redirect_to_login
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from ninja.openapi.docs import DocsBase

from core import roles
from specdash.api import errors

if TYPE_CHECKING:
    from ninja import NinjaAPI

ASSET_DIR = Path(ninja.__file__).resolve().parent / "static" / "ninja"
ASSETS = frozenset(
    {"swagger-ui.css", "swagger-ui-bundle.js", "swagger-ui-init.js", "favicon.png", "favicon.svg"}
)


class LocalSwagger(DocsBase):
    def render_page(self, request: HttpRequest, api: NinjaAPI, **kwargs: Any) -> HttpResponse:
        settings = {
            "url": self.get_openapi_url(api, kwargs),
            "layout": "BaseLayout",
            "deepLinking": True,
            "persistAuthorization": False,
        }
        context = {"api": api, "swagger_settings": json.dumps(settings)}
        return render(request, "api/docs.html", context)


def docs_asset(request: HttpRequest, name: str) -> FileResponse:
    if name not in ASSETS:
        raise Http404("No such docs asset")
    content_type, _ = mimetypes.guess_type(name)
    response = FileResponse((ASSET_DIR / name).open("rb"), content_type=content_type)
    response["Cache-Control"] = "private, max-age=86400"
    return response


def docs_guard(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The schema and the docs page need a login (or a token) and the viewer role like the
    API itself: the page sends browsers to the login form, the schema answers 401, and a user
    without a role gets 403, both in the error shape."""
    from specdash.api.auth import api_auth

    methods = api_auth()

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            user = next((u for u in (m(request) for m in methods) if u), None)
        except errors.ApiError as exc:
            return _json_error(exc.status, exc.code, exc.message)
        if user is None:
            if request.path.endswith("/docs"):
                return redirect_to_login(request.get_full_path())
            return _json_error(401, errors.NOT_AUTHENTICATED, "Send a bearer token or log in.")
        if not roles.can_view(user):
            # The schema names every operation and parameter: the API's readers only.
            return _json_error(
                403, errors.PERMISSION_DENIED, "Your role does not allow reading this."
            )
        return view(request, *args, **kwargs)

    return login_not_required(wrapper)


def _json_error(status: int, code: str, message: str) -> HttpResponse:
    body = json.dumps(errors.error_body(code, message))
    return HttpResponse(body, status=status, content_type="application/json")
