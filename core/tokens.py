"""Personal API tokens: create (the secret is returned once), revoke, authenticate."""

from __future__ import annotations

import hashlib
import logging
import secrets
from datetime import datetime, timedelta
from typing import Any

from django.db import DatabaseError, transaction
from django.utils import timezone

from core.models import ApiToken

logger = logging.getLogger(__name__)

# Recognisable in logs and secret scanners; the rest is 256 bits from the OS's CSPRNG.
TOKEN_PREFIX = "sdt_"  # noqa: S105 (a marker, not a secret)
DISPLAY_PREFIX_LENGTH = 12
# Updating last_used_at on every request would turn each read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class TokenRejected(Exception):
    """A bearer token was sent but cannot be used; ``code`` says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def token_digest(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


def new_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def api_token_create(
    *, user: Any, name: str, expires_at: datetime | None = None
) -> tuple[ApiToken, str]:
    """Create a token for ``user``; returns the row and the secret, which is never stored."""
    raw = new_secret()
    token = ApiToken(
        user=user,
        name=name.strip()[:100] or "API token",
        token_hash=token_digest(raw),
        prefix=raw[:DISPLAY_PREFIX_LENGTH],
        expires_at=expires_at,
    )
    token.full_clean()
    token.save()
    return token, raw


def can_issue_token(*, actor: Any, user: Any) -> bool:
    """Who may mint a token for whom: anyone for themselves, only a superuser for others.

    A token carries its owner's roles and its secret is shown to whoever creates it, so
    minting one for another account is acting as that account (a staff member with the
    admin's token permission would otherwise become any superuser)."""
    return bool(actor.is_active and (actor.is_superuser or actor.pk == user.pk))


def api_token_revoke(*, token: ApiToken) -> ApiToken:
    """Revoke at once (idempotent): the next request with it gets 401."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def user_tokens(*, user: Any) -> list[ApiToken]:
    return list(ApiToken.objects.filter(user=user))


def api_token_authenticate(*, raw: str) -> ApiToken:
    """The usable token for a presented secret, or TokenRejected with the reason."""
    token = ApiToken.objects.select_related("user").filter(token_hash=token_digest(raw)).first()
    if token is None or not token.user.is_active:
        raise TokenRejected("invalid_token", "The API token is not valid.")
    if token.is_revoked:
        raise TokenRejected("token_revoked", "The API token has been revoked.")
    if token.is_expired:
        raise TokenRejected("token_expired", "The API token has expired.")
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_RESOLUTION:
        try:
            # In a savepoint of its own: a refusal must not break a caller's transaction.
            with transaction.atomic():
                ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        except DatabaseError as exc:
            # A stamp, not the request: a full or locked database must not fail every read.
            logger.warning("token %s: last use not recorded: %s", token.prefix, exc)
        else:
            token.last_used_at = now
    return token
