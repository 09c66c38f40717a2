"""The Content-Security-Policy allows only this origin's scripts, and the pages still work:
Plotly draws, htmx swaps, websockets connect, the Swagger UI renders (the page fixture fails
any browser test that logs a policy violation)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import Dashboard, login

pytestmark = pytest.mark.browser

FIRST_PROFILE = (
    "from hosts.models import ServerProfile; "
    "print(ServerProfile.objects.order_by('pk').values_list('pk', flat=True)[0])"
)


def test_pages_work_under_the_policy(page: Page, dashboard: Dashboard) -> None:
    login(page, dashboard)
    policy = page.request.get(dashboard.url + "/").headers["content-security-policy"]
    script_src = next(p for p in policy.split("; ") if p.startswith("script-src"))
    assert script_src == "script-src 'self'"
    # The last line: Django 5.2's shell first reports the models it imported.
    profile_id = dashboard.manage("shell", "-c", FIRST_PROFILE).strip().splitlines()[-1]
    page.goto(f"{dashboard.url}/compare/history/{profile_id}/")
    expect(page.locator("#chart-history .main-svg").first).to_be_attached()  # Plotly drew
    page.goto(dashboard.url + "/api/v1/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("specdash API")


def test_an_injected_inline_script_or_handler_does_not_run(
    page: Page, dashboard: Dashboard, csp_violations: list[str]
) -> None:
    login(page, dashboard)
    # What an XSS would get into the page: an inline script and an inline event handler.
    page.evaluate(
        """() => {
            const s = document.createElement("script");
            s.textContent = "window.__ran = 1";
            document.body.appendChild(s);
            const img = document.createElement("img");
            img.setAttribute("onerror", "window.__ran = 2");
            img.src = "/static/nothing-here.png";
            document.body.appendChild(img);
        }"""
    )
    page.wait_for_function("() => document.querySelector('img[onerror]').complete")
    assert page.evaluate("() => window.__ran === undefined")
    assert len(csp_violations) >= 2, csp_violations
    csp_violations.clear()


def test_a_form_marked_data_confirm_submits_only_when_confirmed(
    page: Page, dashboard: Dashboard
) -> None:
    login(page, dashboard)
    asked: list[str] = []
    accept = False

    def answer(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.on("dialog", answer)
    page.evaluate(
        """() => {
            const form = document.createElement("form");
            form.method = "get";
            form.action = "/servers/";
            form.dataset.confirm = "Really?";
            form.innerHTML = '<button data-testid="confirm-me">go</button>';
            document.body.appendChild(form);
        }"""
    )
    page.get_by_test_id("confirm-me").click()
    assert asked == ["Really?"]
    assert page.url == dashboard.url + "/"
    accept = True
    page.get_by_test_id("confirm-me").click()
    page.wait_for_url(re.compile(r"/servers/\??$"))  # a GET form adds an empty query
    assert asked == ["Really?", "Really?"]
