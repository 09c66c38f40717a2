"""Content-Security-Policy on every response (``SPECDASH_CSP``): scripts only from this origin.

Every page loads its JavaScript from /static/ (Plotly and htmx are vendored, the API docs'
Swagger UI comes from the pinned package), and data reaches scripts through
``json_script`` tags, which are not executed; so an injected ``<script>`` or event handler
would not run. Styles allow 'unsafe-inline' because Plotly and htmx insert ``<style>``
elements at run time; a style cannot run code. ``connect-src 'self'`` covers the
websockets (CSP 3 matches ws:/wss: of the same host and port).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy = settings.SPECDASH_CSP
        if policy and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        return response
