"""ASGI entry point: HTTP through Django, websockets through Channels.

Django's ASGI application is created before anything imports models (routing does), as
Channels requires.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "specdash.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from specdash.origin import SameOriginValidator  # noqa: E402
from specdash.routing import websocket_routes  # noqa: E402
from specdash.static_handler import SafeASGIStaticFilesHandler  # noqa: E402

# The embedded default has no reverse proxy in front, so Daphne serves /static/ itself;
# behind nginx set SPECDASH_SERVE_STATIC=0 and let nginx serve STATIC_ROOT.
http_app = (
    SafeASGIStaticFilesHandler(django_asgi_app)
    if settings.SPECDASH_SERVE_STATIC and not settings.DEBUG
    else django_asgi_app
)

application = ProtocolTypeRouter(
    {
        "http": http_app,
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_routes))),
    }
)
