"""The demo login (``demo`` / ``demo``) that ``forklab demo`` creates, and whether it still
opens this install — so the login page and ``forklab serve`` can name it on a demo install
and stay silent everywhere else (no demo user, or its password changed).

The password check is the hasher's (deliberately slow, about half a CPU second): it runs
once per stored password hash and process; every later question costs one indexed query.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import check_password

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo"

# (the stored hash last checked, whether the demo password matched it)
_last: tuple[str, bool] = ("", False)


def demo_login_open() -> bool:
    """True when an active user ``demo`` exists whose password is still ``demo``."""
    global _last
    stored = (get_user_model().objects.filter(username=DEMO_USERNAME, is_active=True)
              .values_list("password", flat=True).first())
    if not stored:
        return False
    if _last[0] != stored:
        _last = (stored, check_password(DEMO_PASSWORD, stored))
    return _last[1]
