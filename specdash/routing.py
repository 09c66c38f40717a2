"""Every websocket route of the project, collected from the apps' own routing modules."""

from __future__ import annotations

from django.urls import re_path

from benchmarks.routing import websocket_urlpatterns as benchmark_routes
from core.consumers import NotFoundConsumer
from hosts.routing import websocket_urlpatterns as host_routes

websocket_urlpatterns = [*host_routes, *benchmark_routes]
# What the router serves: any other path is closed with 4404, not a server error.
websocket_routes = [*websocket_urlpatterns, re_path(r"", NotFoundConsumer.as_asgi())]
