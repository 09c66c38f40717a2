from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Dashboard, login

pytestmark = pytest.mark.browser


def test_anonymous_visit_redirects_to_login_and_login_shows_the_dashboard(
    page: Page, dashboard: Dashboard
) -> None:
    page.goto(dashboard.url + "/servers/")
    assert "/accounts/login/" in page.url
    login(page, dashboard)
    expect(page.locator("h1")).to_have_text("Dashboard")
    # In the profiles card (the recent sweeps and experiments may name them too).
    profiles = page.locator("section", has=page.get_by_role("heading", name="Server profiles"))
    expect(profiles.get_by_text("Simulated SGLang baseline")).to_be_visible()
    expect(profiles.get_by_text("Simulated SGLang EAGLE-3")).to_be_visible()
    expect(page.locator("nav")).to_contain_text("Servers")
    expect(page.locator("nav")).to_contain_text("Experiments")


def test_wrong_password_is_refused(page: Page, dashboard: Dashboard) -> None:
    page.goto(dashboard.url + "/accounts/login/")
    page.fill("input[name=username]", dashboard.username)
    page.fill("input[name=password]", "wrong")
    page.click("button[type=submit]")
    expect(page.locator(".error")).to_be_visible()
    assert "/accounts/login/" in page.url


def test_static_assets_are_served_locally(page: Page, dashboard: Dashboard) -> None:
    login(page, dashboard)
    for path in (
        "/static/vendor/plotly.min.js",
        "/static/django_htmx/htmx-2.min.js",
        "/static/specdash/app.css",
    ):
        response = page.request.get(dashboard.url + path)
        assert response.status == 200, path
