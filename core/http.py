"""Typed request for views behind django-htmx's middleware, and the page-or-partial render."""

from __future__ import annotations

from collections.abc import Mapping

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.middleware import HtmxDetails


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails


def render_page(
    request: HtmxHttpRequest, template: str, context: Mapping[str, object], *, partial: str
) -> HttpResponse:
    """The whole page, or only its ``partial`` (``template#partial``) when htmx asks for it."""
    return render(request, f"{template}#{partial}" if request.htmx else template, context)
