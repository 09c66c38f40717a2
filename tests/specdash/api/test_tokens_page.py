"""The account page: create a token (shown once), list, revoke; and the admin."""

from __future__ import annotations

import re
from datetime import date, timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from core.models import ApiToken
from core.tokens import can_issue_token
from tests.specdash.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def _secret(html: str) -> str:
    match = re.search(r'data-testid="token-secret">(sdt_[\w-]+)<', html)
    assert match, html
    return match.group(1)


def test_a_created_token_is_shown_once_and_works(client: Client, operator: User) -> None:
    client.force_login(operator)
    created = client.post("/account/tokens/", {"name": "nightly"})
    assert created.status_code == 200
    secret = _secret(created.content.decode())
    assert ApiClient(secret).get("/api/v1/instances").status_code == 200
    listing = client.get("/account/tokens/").content.decode()
    assert "nightly" in listing and secret not in listing
    assert secret[:12] in listing  # the prefix, to recognise it


def test_an_expiry_date_is_stored_and_a_past_one_refused(client: Client, operator: User) -> None:
    client.force_login(operator)
    tomorrow = date.today() + timedelta(days=2)
    client.post("/account/tokens/", {"name": "short", "expires_on": tomorrow.isoformat()})
    token = ApiToken.objects.get(name="short")
    assert token.expires_at is not None and token.expires_at.date() >= tomorrow - timedelta(days=1)
    past = client.post("/account/tokens/", {"name": "old", "expires_on": "2001-01-01"})
    assert past.status_code == 400
    assert not ApiToken.objects.filter(name="old").exists()


def test_revoking_stops_the_token(client: Client, operator: User) -> None:
    client.force_login(operator)
    secret = _secret(client.post("/account/tokens/", {"name": "ci"}).content.decode())
    token = ApiToken.objects.get()
    response = client.post(f"/account/tokens/{token.pk}/revoke/")
    assert response.status_code == 302
    assert ApiClient(secret).get("/api/v1/instances").status_code == 401


def test_nobody_can_revoke_another_users_token(
    client: Client, operator: User, viewer: User
) -> None:
    client.force_login(operator)
    client.post("/account/tokens/", {"name": "mine"})
    token = ApiToken.objects.get()
    client.force_login(viewer)
    assert client.post(f"/account/tokens/{token.pk}/revoke/").status_code == 404
    token.refresh_from_db()
    assert token.revoked_at is None


def test_the_nav_links_to_the_tokens_page(client: Client, viewer: User) -> None:
    client.force_login(viewer)
    assert 'href="/account/tokens/"' in client.get("/").content.decode()


def test_the_admin_shows_a_new_token_once_and_never_its_hash(client: Client, roles: None) -> None:
    admin = User.objects.create_superuser("root", password="root-pass-123")
    client.force_login(admin)
    response = client.post(
        "/admin/core/apitoken/add/", {"user": admin.pk, "name": "from admin"}, follow=True
    )
    assert response.status_code == 200
    token = ApiToken.objects.get(name="from admin")
    secret = re.search(r"(sdt_[\w-]{40,})", response.content.decode())
    assert secret and ApiClient(secret.group(1)).get("/api/v1/hosts").status_code == 200
    change = client.get(f"/admin/core/apitoken/{token.pk}/change/").content.decode()
    assert secret.group(1) not in change and token.token_hash not in change


def test_staff_with_the_token_permission_cannot_mint_a_token_for_a_superuser(
    client: Client, roles: None
) -> None:
    boss = User.objects.create_superuser("boss", password="boss-pass-123")
    clerk = User.objects.create_user("clerk", password="clerk-pass-123", is_staff=True)
    clerk.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="core", codename__endswith="apitoken")
    )
    client.force_login(clerk)
    refused = client.post("/admin/core/apitoken/add/", {"user": boss.pk, "name": "mine now"})
    assert refused.status_code == 200  # the form again, with the error
    assert "Select a valid choice" in refused.content.decode()
    assert not ApiToken.objects.filter(user=boss).exists()
    assert re.search(r"sdt_[\w-]{40,}", refused.content.decode()) is None
    # Their own token is fine (as on the account page).
    own = client.post("/admin/core/apitoken/add/", {"user": clerk.pk, "name": "own"})
    assert own.status_code == 302
    assert ApiToken.objects.get(name="own").user == clerk


def test_the_token_rule_lives_in_the_service_too(roles: None) -> None:
    boss = User.objects.create_superuser("boss", password="boss-pass-123")
    clerk = User.objects.create_user("clerk", is_staff=True)
    assert not can_issue_token(actor=clerk, user=boss)
    assert can_issue_token(actor=clerk, user=clerk)
    assert can_issue_token(actor=boss, user=clerk)
