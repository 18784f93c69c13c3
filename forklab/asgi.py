"""ASGI entry point: HTTP through Django, websockets through Channels (``daphne``)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forklab.settings")

from django.core.asgi import get_asgi_application

# Initialise Django (apps, models) before importing anything that touches the ORM.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import URLPattern, path  # noqa: E402

from forklab.web.consumers import RunStreamConsumer, TokenAuthMiddleware  # noqa: E402

websocket_urlpatterns: list[URLPattern] = [
    path("ws/runs/<str:run_id>/", RunStreamConsumer.as_asgi(), name="ws-run-stream"),
]

# static files are served by WhiteNoise's middleware (settings: FORKLAB_SERVE_STATIC)
http_app = django_asgi_app

application = ProtocolTypeRouter({
    "http": http_app,
    # Session first (browsers); a DRF token, when given, replaces the session user (scripts).
    "websocket": AllowedHostsOriginValidator(
        AuthMiddlewareStack(TokenAuthMiddleware(URLRouter(websocket_urlpatterns)))),
})
