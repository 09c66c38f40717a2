"""Login throttling (django-axes): who a failed login is counted against.

A lockout is keyed by username *and* client address, so someone who knows the demo
operator's username can lock out only their own address, never the operator's; it ends by
itself after the cool-off, and failures during it do not extend it. Behind a reverse proxy
every client arrives from the proxy's address, so the address is read from
X-Forwarded-For, counting ``SPECDASH_TRUSTED_PROXIES`` hops from the right (the entries our
own proxies appended; anything further left is the client's to forge).
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    hops = int(getattr(settings, "SPECDASH_TRUSTED_PROXIES", 0))
    remote = str(request.META.get("REMOTE_ADDR") or "")
    if hops <= 0:
        return remote
    forwarded = [a.strip() for a in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",")]
    forwarded = [a for a in forwarded if a]
    return forwarded[-hops] if len(forwarded) >= hops else remote
