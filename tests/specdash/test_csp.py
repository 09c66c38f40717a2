"""Every response carries the Content-Security-Policy, and no template needs it loosened."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

TEMPLATES = Path(settings.BASE_DIR) / "templates"
# A self-contained download, opened from disk (where no header applies), never served inline.
DOWNLOADS = {"benchmarks/comparison_report.html"}
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)(?![^>]*type=\"application/json\")[^>]*>", re.I)
INLINE_HANDLER = re.compile(r"\son[a-z]+\s*=", re.I)


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/", "/accounts/login/", "/api/v1/docs", "/servers/"])
def test_pages_carry_a_policy_that_allows_only_own_scripts(
    client: Client, viewer: Any, path: str
) -> None:
    client.force_login(viewer)
    policy = client.get(path)["Content-Security-Policy"]
    parts = dict(p.split(" ", 1) for p in policy.split("; "))
    assert parts["script-src"] == "'self'"
    assert parts["object-src"] == "'none'" and parts["frame-ancestors"] == "'none'"


def test_no_served_template_has_an_inline_script_or_handler() -> None:
    offenders = []
    for template in TEMPLATES.rglob("*.html"):
        name = template.relative_to(TEMPLATES).as_posix()
        text = template.read_text()
        if name not in DOWNLOADS and (INLINE_SCRIPT.search(text) or INLINE_HANDLER.search(text)):
            offenders.append(name)
    assert offenders == []
