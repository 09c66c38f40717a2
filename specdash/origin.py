"""Websocket Origin check: same origin as the page, port included.

Channels' ``AllowedHostsOriginValidator`` compares only the Origin's host name with
ALLOWED_HOSTS, so a page served from another port of an allowed host (another app on the
same machine) could open the dashboard's sockets with the user's cookie. Here the Origin
must name the host *and port* the socket was opened on (the Host header, which a browser
always sends and a page cannot set), or be listed in CSRF_TRUSTED_ORIGINS, as Django's own
CSRF check does for forms.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from asgiref.typing import WebSocketScope
from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_port(netloc: str, default_port: int) -> tuple[str, int] | None:
    host, port = split_domain_port(netloc)
    if not host:
        return None
    if not port:
        return host, default_port
    return (host, int(port)) if port.isdigit() else None


def origin_allowed(origin: str, host_header: str, *, secure: bool = False) -> bool:
    """Whether a websocket opened with ``Origin: origin`` on ``Host: host_header`` is ours:
    the Origin's scheme too must be the page's (https for a ``wss`` socket, http for ``ws``),
    or an http page on the same host and port would pass for the https one."""
    if origin in settings.CSRF_TRUSTED_ORIGINS:
        return True
    try:
        parts = urlsplit(origin)
        origin_port = parts.port
    except ValueError:
        return False
    if parts.scheme != ("https" if secure else "http") or not parts.hostname:
        return False
    default = DEFAULT_PORTS[parts.scheme]
    served = _host_port(host_header.lower(), default)
    if served is None or not validate_host(served[0], settings.ALLOWED_HOSTS):
        return False
    return (parts.hostname.lower(), origin_port or default) == (served[0].strip("[]"), served[1])


def _secure(scope: WebSocketScope, headers: dict[bytes, bytes]) -> bool:
    """Whether the socket is TLS: its own scheme, or behind a proxy trusted for it
    (SPECDASH_SECURE sets SECURE_PROXY_SSL_HEADER) the X-Forwarded-Proto it sends."""
    if scope.get("scheme") == "wss":
        return True
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        name = proxy_header[0].removeprefix("HTTP_").replace("_", "-").lower().encode()
        return bool(headers.get(name, b"").decode("latin-1") == proxy_header[1])
    return False


class SameOriginValidator:
    """ASGI middleware for websocket scopes: deny unless ``origin_allowed``."""

    def __init__(self, application: Any) -> None:
        self.application = application

    # The websocket protocol's scope (this middleware is routed websocket scopes only).
    async def __call__(self, scope: WebSocketScope, receive: Any, send: Any) -> Any:
        headers = dict(scope.get("headers") or [])
        origin = headers.get(b"origin", b"").decode("latin-1")
        host = headers.get(b"host", b"").decode("latin-1")
        if origin and host and origin_allowed(origin, host, secure=_secure(scope, headers)):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
