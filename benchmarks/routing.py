from __future__ import annotations

from django.urls import path

from benchmarks import consumers

websocket_urlpatterns = [
    path("ws/sweeps/<int:sweep_id>/", consumers.SweepConsumer.as_asgi()),
    path("ws/experiments/<int:experiment_id>/", consumers.ExperimentConsumer.as_asgi()),
]
