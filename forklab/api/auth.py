"""API token authentication with a short per-process memory of recent tokens.

Every API request by token costs DRF a query (the token joined with its user) before the
view runs — for a small request like ``POST /forks/`` one of its six queries. A script or a
burst sends the same token again and again within seconds, so a web process keeps the
answer for ``FORKLAB_TOKEN_CACHE_S`` seconds (default 5; ``0`` asks the database every
time).

Invariants:

- a hit is only ever a token the database confirmed, for an active user, at most
  ``FORKLAB_TOKEN_CACHE_S`` seconds ago; an unknown or inactive token is never remembered
  (each attempt asks the database and fails as before);
- deleting or replacing a token, or saving or deleting a user, forgets that token / that
  user's tokens in the process that did it at once (signals). **Other processes** keep
  accepting a deleted token, or a deactivated user, for up to ``FORKLAB_TOKEN_CACHE_S``
  seconds: the price of the saved query, stated in docs/deployment.md;
- each request gets its own copy of the user object, so nothing one request caches on its
  user (permission caches, attributes) leaks into another's.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models.signals import post_delete, post_save
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token

#: at most this many tokens remembered per process (the oldest go first)
MAX_TOKENS = 1024

_remembered: dict[str, tuple[float, Any, Token]] = {}  # key -> (expires, user, token)
_lock = threading.Lock()


def clock() -> float:
    """Seconds on a monotonic clock (a function, so tests can move time)."""
    return time.monotonic()


class CachedTokenAuthentication(TokenAuthentication):
    """DRF's ``TokenAuthentication`` (same header, same errors), remembering tokens it
    confirmed for ``FORKLAB_TOKEN_CACHE_S`` seconds."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Token]:
        ttl = settings.FORKLAB_TOKEN_CACHE_S
        if ttl <= 0:
            return super().authenticate_credentials(key)
        now = clock()
        with _lock:
            hit = _remembered.get(key)
        if hit is not None and hit[0] > now:
            return copy.copy(hit[1]), hit[2]
        user, token = super().authenticate_credentials(key)  # raises for unknown / inactive
        with _lock:
            if len(_remembered) >= MAX_TOKENS:
                for stale in [k for k, (expires, _u, _t) in _remembered.items()
                              if expires <= now] or list(_remembered)[:MAX_TOKENS // 4]:
                    del _remembered[stale]
            _remembered[key] = (now + ttl, copy.copy(user), token)
        return user, token


def forget(*, key: str | None = None, user_id: Any = None) -> None:
    """Forget one token, every token of one user, or (no arguments) everything."""
    with _lock:
        if key is None and user_id is None:
            _remembered.clear()
            return
        for k in [k for k, (_e, user, _t) in _remembered.items()
                  if k == key or (user_id is not None and user.pk == user_id)]:
            del _remembered[k]


def _token_gone(sender: Any, instance: Token, **kwargs: Any) -> None:
    forget(key=instance.key)


def _user_changed(sender: Any, instance: Any, **kwargs: Any) -> None:
    forget(user_id=instance.pk)


post_delete.connect(_token_gone, sender=Token, dispatch_uid="forklab-token-cache-token")
post_save.connect(_user_changed, sender=get_user_model(), dispatch_uid="forklab-token-cache-user")
post_delete.connect(_user_changed, sender=get_user_model(),
                    dispatch_uid="forklab-token-cache-user-gone")
