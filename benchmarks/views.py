"""Thin views over benchmarks' selectors and services."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from benchmarks import selectors
from hosts import roles


@roles.viewer_required
def sweep_list(request: HttpRequest) -> HttpResponse:
    return render(
        request, "benchmarks/sweeps.html", {"sweeps": selectors.sweep_list()[:100], "nav": "sweeps"}
    )


@roles.viewer_required
def sweep_detail(request: HttpRequest, sweep_id: int) -> HttpResponse:
    sweep = selectors.sweep_detail(sweep_id=sweep_id)
    if sweep is None:
        raise Http404("No such sweep")
    context = {"sweep": sweep, "levels": selectors.sweep_levels(sweep_id=sweep_id), "nav": "sweeps"}
    return render(request, "benchmarks/sweep_detail.html", context)


@roles.viewer_required
def experiment_list(request: HttpRequest) -> HttpResponse:
    context = {"experiments": selectors.experiment_list()[:100], "nav": "experiments"}
    return render(request, "benchmarks/experiments.html", context)
