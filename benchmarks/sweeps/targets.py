"""Where a base-URL sweep may point: a registered host's address, a prefix the deployment
lists in ``SPECDASH_SWEEP_BASE_URLS``, or (staff allowed to edit the registry) anywhere.

The load generator sends GETs and POSTs under the base URL and the sweep stores what comes
back (error messages, a metrics scrape's problem) where viewers read it, so an open target
would let an operator read internal services through the dashboard. The URL is normalised
before the check, and the normalised URL is the one stored and used: dot segments resolved
(``/v1/../admin`` is ``/admin``), no query string, fragment or user info (``?x=`` would turn
every path the load generator appends into a query value).
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.core.exceptions import ValidationError

from core.roles import can_manage_registry
from hosts.models import Host, HostKind, ServerProfile

ANY = "*"  # in SPECDASH_SWEEP_BASE_URLS: any http(s) URL (the open behaviour of old)
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_ENCODED_DOT = re.compile(r"%2e", re.IGNORECASE)
_ENCODED_SEPARATOR = re.compile(r"%2f|%5c", re.IGNORECASE)


def _refuse(message: str) -> ValidationError:
    return ValidationError({"base_url": message})


def normalised_base_url(url: str) -> str:
    """``url`` as the sweep will use it: scheme and host lower-cased, dot segments resolved,
    no trailing slash; ValidationError (keyed "base_url") for anything that could make the
    load generator reach another path than the one checked."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise _refuse("Enter an http(s) URL.") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        raise _refuse("Enter an http(s) URL.")
    if "@" in parts.netloc:
        raise _refuse("A base URL has no user name or password.")
    if "?" in url or "#" in url:
        raise _refuse("A base URL has no query string or fragment (?...#...).")
    if "\\" in parts.path or _ENCODED_SEPARATOR.search(parts.path):
        raise _refuse("A base URL's path has no backslash or encoded slash.")
    path = _ENCODED_DOT.sub(".", parts.path)
    if path:
        path = posixpath.normpath(path)
        path = "" if path in ("/", ".", "//") else "/" + path.lstrip("/")
    host = parts.hostname.lower()
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return urlunsplit((scheme, netloc, path.rstrip("/"), "", ""))


def _address(name: str) -> str:
    name = name.strip().strip("[]").lower()
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def registered_addresses() -> set[str]:
    """The addresses of registered hosts: SSH hosts' addresses, profiles' API hosts, and
    loopback when a local host is registered."""
    addresses = {
        _address(a) for a in Host.objects.exclude(address="").values_list("address", flat=True)
    }
    addresses |= {
        _address(a)
        for a in ServerProfile.objects.exclude(api_host="").values_list("api_host", flat=True)
    }
    if Host.objects.filter(kind=HostKind.LOCAL).exists():
        addresses |= {_address(a) for a in _LOOPBACK}
    return addresses


def _origin_and_path(url: str) -> tuple[str, str, int, str]:
    parts = urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme, 0)
    return parts.scheme, _address(parts.hostname or ""), port, parts.path.rstrip("/") + "/"


def _listed(url: str, prefixes: list[str]) -> bool:
    target = _origin_and_path(url)
    for prefix in prefixes:
        try:
            allowed = _origin_and_path(normalised_base_url(prefix))
        except ValidationError:
            continue
        if target[:3] == allowed[:3] and target[3].startswith(allowed[3]):
            return True
    return False


def base_url_check(url: str, *, user: Any) -> str:
    """The normalised ``url`` if ``user`` may run a sweep against it, else ValidationError
    (keyed "base_url") naming what is allowed."""
    normal = normalised_base_url(url)
    prefixes = [p for p in settings.SPECDASH_SWEEP_BASE_URLS if p]
    if ANY in prefixes or can_manage_registry(user):
        return normal
    if _origin_and_path(normal)[1] in registered_addresses() or _listed(normal, prefixes):
        return normal
    listed = f", or under {', '.join(prefixes)}" if prefixes else ""
    raise _refuse(
        "This deployment runs sweeps only against registered hosts' addresses"
        f"{listed} (SPECDASH_SWEEP_BASE_URLS; docs/operations.md, Security)."
    )
