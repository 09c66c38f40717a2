"""Requests that must not become server errors: a body over the upload limit answers 413
before anything reads it, and an id too large for the database's integers answers 404.

Django raises ``RequestDataTooBig`` when a view (or the CSRF check) reads a body over
``DATA_UPLOAD_MAX_MEMORY_SIZE`` (2.5 MB), and SQLite raises ``OverflowError`` for an integer
past 2^63 - 1 taken from a URL (``/sweeps/9223372036854775808/``); both used to surface as
500s. The API maps the same exceptions in its own handlers (specdash/api/errors.py).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.handlers.exception import response_for_exception
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

TOO_LARGE = "The request body is larger than this server accepts"
# The one page that takes a body larger than the limit: the trace upload (benchmarks.sweeps.traces).
TRACE_UPLOAD_PATH = "/traces/upload/"


def body_limit() -> int | None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return int(limit) if limit is not None else None


def too_large_response(request: HttpRequest) -> HttpResponse:
    limit = body_limit()
    message = f"{TOO_LARGE} ({limit} bytes)." if limit is not None else f"{TOO_LARGE}."
    if request.path.startswith("/api/"):
        body = {"error": {"code": "too_large", "message": message, "fields": {}}}
        return JsonResponse(body, status=413)
    return HttpResponse(message, status=413, content_type="text/plain; charset=utf-8")


class RequestLimitsMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit = body_limit()
        if limit is not None and request.path == TRACE_UPLOAD_PATH:
            # A trace upload's file goes to a temporary file, not memory (Django counts only
            # the form's other fields against DATA_UPLOAD_MAX_MEMORY_SIZE); the trace service
            # counts the file's bytes against SPECDASH_TRACE_MAX_BYTES. The multipart framing
            # and the other fields get 1 MiB over it.
            limit = max(limit, int(settings.SPECDASH_TRACE_MAX_BYTES) + (1 << 20))
        length = request.META.get("CONTENT_LENGTH") or "0"
        if limit is not None and (not length.isdigit() or int(length) > limit):
            return too_large_response(request)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, RequestDataTooBig):
            return too_large_response(request)
        if isinstance(exception, OverflowError):
            return response_for_exception(request, Http404("No such object."))
        return None
