"""``forklab.api.auth``: a web process remembers a confirmed API token for a few seconds.

What must hold: a remembered token saves its query; a token deleted, or a user deactivated,
in this process is refused at once; a change the process did not see (another process's
delete) is refused once ``FORKLAB_TOKEN_CACHE_S`` has passed; ``0`` turns the memory off; an
unknown token is never remembered; requests never share a user object.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token

from forklab.api import auth
from tests.api.conftest import API, World

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def empty_memory() -> Iterator[None]:
    auth.forget()
    yield
    auth.forget()


def token_queries(world: World, who: str) -> tuple[int, int]:
    """(status, queries on the token table) of one API request by ``who``'s token."""
    with CaptureQueriesContext(connection) as queries:
        response = world.client(who).get(f"{API}/graphs/")
    return response.status_code, sum('"authtoken_token"' in q["sql"]
                                     for q in queries.captured_queries)


def test_a_confirmed_token_is_not_looked_up_again(world: World) -> None:
    assert token_queries(world, "member") == (200, 1)
    assert token_queries(world, "member") == (200, 0)
    assert token_queries(world, "viewer") == (200, 1)  # each token on its own


@override_settings(FORKLAB_TOKEN_CACHE_S=0)
def test_zero_looks_every_token_up(world: World) -> None:
    assert token_queries(world, "member") == (200, 1)
    assert token_queries(world, "member") == (200, 1)


def test_an_unknown_token_is_never_remembered(world: World) -> None:
    from django.test import Client

    client = Client(headers={"Authorization": "Token " + "0" * 40})
    for _ in range(2):
        with CaptureQueriesContext(connection) as queries:
            assert client.get(f"{API}/graphs/").status_code == 401
        assert any('"authtoken_token"' in q["sql"] for q in queries.captured_queries)


def test_a_token_deleted_here_is_refused_at_once(world: World) -> None:
    assert token_queries(world, "member")[0] == 200
    Token.objects.get(key=world.tokens["member"]).delete()
    assert token_queries(world, "member")[0] == 401


def test_a_user_deactivated_here_is_refused_at_once(world: World) -> None:
    assert token_queries(world, "member")[0] == 200
    user = world.users["member"]
    user.is_active = False
    user.save()
    assert token_queries(world, "member")[0] == 401


def test_a_delete_this_process_did_not_see_is_refused_once_the_memory_expires(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(auth, "clock", lambda: now[0])
    assert token_queries(world, "member")[0] == 200
    Token.objects.filter(key=world.tokens["member"])._raw_delete(connection.alias)  # no signal
    assert token_queries(world, "member")[0] == 200  # the stated window
    now[0] += 5.01
    assert token_queries(world, "member")[0] == 401


def test_requests_get_their_own_user_object() -> None:
    first, second = [], []

    class Fake:
        pk = 7

    auth._remembered["k"] = (float("inf"), Fake(), object())  # type: ignore[assignment]
    first.append(auth.CachedTokenAuthentication().authenticate_credentials("k")[0])
    second.append(auth.CachedTokenAuthentication().authenticate_credentials("k")[0])
    assert first[0] is not second[0]
    first[0].cached = "one request's"
    assert not hasattr(second[0], "cached")
