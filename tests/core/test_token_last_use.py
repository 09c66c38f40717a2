"""A token's last-use stamp is a write made by a read: a database that refuses writes must not
fail the request it was made for."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.utils import timezone

from core.models import ApiToken
from core.tokens import api_token_authenticate, api_token_create


@pytest.mark.django_db(transaction=True)
def test_a_token_authenticates_while_its_last_use_cannot_be_written(
    short_busy_timeout: float,
) -> None:
    user = User.objects.create_user("reader", password="reader-pass-123")
    token, secret = api_token_create(user=user, name="t")
    holder = sqlite3.connect(connection.settings_dict["NAME"], timeout=5, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        found = api_token_authenticate(raw=secret)
        assert found.pk == token.pk and found.last_used_at is None
        holder.execute("COMMIT")
        stamped = api_token_authenticate(raw=secret)
        assert stamped.last_used_at is not None
        assert timezone.now() - stamped.last_used_at < timedelta(minutes=1)
        assert ApiToken.objects.get(pk=token.pk).last_used_at == stamped.last_used_at
    finally:
        holder.close()
        connection.close()
