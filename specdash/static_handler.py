"""Daphne's /static/ handler: a path that escapes the static root answers 404, not 500.

Django's ASGIStaticFilesHandler turns only Http404 into a response; the
``SuspiciousFileOperation`` a traversal such as ``/static/%2e%2e/%2e%2e/etc/passwd`` raises
reached the client as a server error (nothing was read: the path was refused), as did a
path with a NUL byte.
"""

from __future__ import annotations

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest
from django.http.response import FileResponse


class SafeASGIStaticFilesHandler(ASGIStaticFilesHandler):
    def serve(self, request: HttpRequest) -> FileResponse:
        if "\x00" in request.path:
            # The finders answer a NUL byte with a list, which serve() then fails on.
            raise Http404("No such file.")
        try:
            return super().serve(request)
        except (SuspiciousOperation, ValueError):
            raise Http404("No such file.") from None
