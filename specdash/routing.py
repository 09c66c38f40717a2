"""Every websocket route of the project, collected from the apps' own routing modules."""

from __future__ import annotations

from benchmarks.routing import websocket_urlpatterns as benchmark_routes
from hosts.routing import websocket_urlpatterns as host_routes

websocket_urlpatterns = [*host_routes, *benchmark_routes]
