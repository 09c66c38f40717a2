"""The app's pages: one wiring module that joins each slice's routes under the one
``benchmarks`` namespace the templates reverse (``benchmarks:sweep-detail``); a slice's routes
module names no namespace of its own, so its names land in this one."""

from __future__ import annotations

from django.urls import include, path

app_name = "benchmarks"

urlpatterns = [
    path("", include("benchmarks.sweeps.urls")),
    path("", include("benchmarks.experiments.urls")),
]
