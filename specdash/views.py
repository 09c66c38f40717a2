from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from benchmarks import selectors as benchmarks_selectors
from core.roles import viewer_required
from hosts import selectors

RECENT = 5


# The overview lists SSH destinations, containers, running servers and the latest results:
# viewers only.
@viewer_required
def home(request: HttpRequest) -> HttpResponse:
    context = {
        **selectors.dashboard_overview(),
        "recent_sweeps": benchmarks_selectors.sweep_list()[:RECENT],
        "recent_experiments": benchmarks_selectors.experiment_list()[:RECENT],
    }
    return render(request, "home.html", context)
