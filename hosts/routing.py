from __future__ import annotations

from django.urls import path

from hosts import consumers

websocket_urlpatterns = [
    path("ws/instances/<int:instance_id>/", consumers.InstanceConsumer.as_asgi()),
]
