"""ASGI entry point: HTTP through Django, websockets through Channels (``daphne``).

Loading it starts the process's recovery supervisor (``forklab.runs.recovery``): a sweep
for runs whose executor died — at web start-up, then every FORKLAB_RECOVERY_SWEEP_S.
"""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "forklab.settings")

from forklab.serving import get_asgi_application

# Initialise Django (apps, models) before importing anything that touches the ORM.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.urls import URLPattern, path  # noqa: E402

from forklab.runs.recovery import supervisor  # noqa: E402
from forklab.web.consumers import (  # noqa: E402
    OriginValidator,
    RunStreamConsumer,
    TokenAuthMiddleware,
)

websocket_urlpatterns: list[URLPattern] = [
    path("ws/runs/<str:run_id>/", RunStreamConsumer.as_asgi(), name="ws-run-stream"),
]

# static files are served by WhiteNoise's middleware (settings: FORKLAB_SERVE_STATIC)
http_app = django_asgi_app

application = ProtocolTypeRouter({
    "http": http_app,
    # Session first (browsers); a DRF token, when given, replaces the session user (scripts).
    # Browser origins are checked; a token client without an Origin header is a script.
    "websocket": OriginValidator(
        AuthMiddlewareStack(TokenAuthMiddleware(URLRouter(websocket_urlpatterns)))),
})

supervisor.start()  # off when FORKLAB_RECOVERY_SWEEP_S is 0 (the test settings)
