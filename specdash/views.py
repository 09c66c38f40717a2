from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from benchmarks.experiments import selectors as experiment_selectors
from benchmarks.sweeps import selectors as sweep_selectors
from core.roles import viewer_required
from hosts import selectors

RECENT = 5


# The overview lists SSH destinations, containers, running servers and the latest results:
# viewers only.
@viewer_required
def home(request: HttpRequest) -> HttpResponse:
    context = {
        **selectors.dashboard_overview(),
        "recent_sweeps": sweep_selectors.sweep_list()[:RECENT],
        "recent_experiments": experiment_selectors.experiment_list()[:RECENT],
    }
    return render(request, "home.html", context)
