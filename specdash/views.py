from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from hosts import selectors


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html", selectors.dashboard_overview())
