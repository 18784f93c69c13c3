from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from forklab.api.views import otlp
from forklab.web import metrics
from forklab.web.views.login import LoginPage

urlpatterns = [
    path("", include("forklab.web.urls")),
    path("accounts/login/", LoginPage.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/", include("forklab.api.urls")),
    path("metrics", metrics.metrics, name="metrics"),
    # OTLP/HTTP's fixed path (no trailing slash): exporters append it to their endpoint
    path("v1/traces", otlp.traces, name="otlp-traces"),
    path("v1/logs", otlp.logs, name="otlp-logs"),
]

handler400 = "forklab.web.views.errors.bad_request"
handler403 = "forklab.web.views.errors.permission_denied"
handler404 = "forklab.web.views.errors.page_not_found"
handler500 = "forklab.web.views.errors.server_error"
