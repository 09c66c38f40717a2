from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.roles import viewer_required
from hosts import selectors


# The overview lists SSH destinations, containers and running servers: viewers only.
@viewer_required
def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html", selectors.dashboard_overview())
