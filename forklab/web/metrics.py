"""``GET /metrics``: Prometheus text exposition (SPEC §3.11).

Restricted by default: with ``FORKLAB_METRICS_TOKEN`` set, a scraper must send
``Authorization: Bearer <token>``; without one, only clients whose address is in
``FORKLAB_METRICS_ALLOW`` (addresses or networks; loopback by default, ``*`` for anyone) may
read it. Anyone else gets 403.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils.crypto import constant_time_compare
from django.views.decorators.http import require_GET

from forklab.runs.metrics import exposition


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    token = settings.FORKLAB_METRICS_TOKEN
    if token and not constant_time_compare(
            request.headers.get("Authorization", ""), f"Bearer {token}"):
        return HttpResponse("metrics need Authorization: Bearer <FORKLAB_METRICS_TOKEN>\n",
                            status=401, content_type="text/plain")
    if not token and not allowed(request.META.get("REMOTE_ADDR", "")):
        return HttpResponse("metrics are readable from FORKLAB_METRICS_ALLOW addresses only "
                            "(or set FORKLAB_METRICS_TOKEN)\n", status=403,
                            content_type="text/plain")
    body, content_type = exposition()
    return HttpResponse(body, content_type=content_type)


def allowed(address: str) -> bool:
    """True when ``address`` is in ``FORKLAB_METRICS_ALLOW`` (``*`` allows every address)."""
    allow = settings.FORKLAB_METRICS_ALLOW
    if "*" in allow:
        return True
    try:
        client = ipaddress.ip_address(address)
    except ValueError:
        return False
    for entry in allow:
        try:
            if client in ipaddress.ip_network(entry, strict=False):
                return True
        except ValueError:
            continue
    return False
