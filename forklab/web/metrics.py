"""``GET /metrics``: Prometheus text exposition (SPEC §3.11).

Open by default, like most scrape targets; with ``FORKLAB_METRICS_TOKEN`` set, a scraper must
send ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

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
    body, content_type = exposition()
    return HttpResponse(body, content_type=content_type)
