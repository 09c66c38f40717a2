from __future__ import annotations

from django.urls import path

from hosts import consumers

websocket_urlpatterns = [
    path("ws/instances/<int:instance_id>/", consumers.InstanceConsumer.as_asgi()),
    # target: hosts | instances | sweeps
    path("ws/telemetry/<str:target>/<int:pk>/", consumers.TelemetryConsumer.as_asgi()),
]
