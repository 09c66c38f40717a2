"""The app's websocket routes: one wiring module that only imports each slice's consumer."""

from __future__ import annotations

from django.urls import path

from benchmarks.experiments.consumers import ExperimentConsumer
from benchmarks.sweeps.consumers import SweepConsumer

websocket_urlpatterns = [
    path("ws/sweeps/<int:sweep_id>/", SweepConsumer.as_asgi()),
    path("ws/experiments/<int:experiment_id>/", ExperimentConsumer.as_asgi()),
]
