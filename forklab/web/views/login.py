"""The login page: Django's, naming the demo login on an install where it still opens."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.views import LoginView

from forklab.runs.demo_login import DEMO_PASSWORD, DEMO_USERNAME, demo_login_open


class LoginPage(LoginView):
    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        if demo_login_open():
            context["demo_login"] = {"username": DEMO_USERNAME, "password": DEMO_PASSWORD}
        return context
