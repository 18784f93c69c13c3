"""Error pages: a reader without an account never sees Django's debug page, a damaged link
says it is damaged, and a point that is no fork point says why."""

from __future__ import annotations

import logging
import re

import pytest
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory, override_settings

from forklab.engine.errors import ForklabError
from forklab.runs.error_status import status_for
from forklab.web.views import shares
from forklab.web.views.common import page_errors
from tests.api.test_errors import every_error_code
from tests.web.conftest import World, page

pytestmark = pytest.mark.django_db

DEBUG_PAGE_MARKERS = ("Traceback", "URLconf", "Request Method", "DEBUG = True")


def quiet_client() -> Client:
    """A client that reports a crash as the 500 response a browser would get."""
    return Client(raise_request_exception=False)


def share_token(world: World) -> str:
    from forklab.runs import sharing

    link = sharing.create_share(user=world.users["demo"], kind="run",
                                target={"run": world.runs["research-write"]})
    return link.token


@override_settings(DEBUG=True)
def test_a_share_page_that_crashes_shows_the_plain_page_even_with_debug_on(
        world: World, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom inside the run page")

    monkeypatch.setattr(shares, "run_context", broken)
    with caplog.at_level(logging.ERROR, logger="forklab.web"):
        response = quiet_client().get(f"/s/{share_token(world)}/")
    assert response.status_code == 500
    html = page(response)
    assert "Something went wrong" in html
    assert not any(marker in html for marker in DEBUG_PAGE_MARKERS)
    assert "boom inside the run page" not in html
    assert any("boom inside the run page" in str(r.exc_info) for r in caplog.records)


@override_settings(DEBUG=True)
def test_an_unknown_address_is_a_plain_404_for_an_anonymous_reader(world: World) -> None:
    for url in ("/no/such/page/", "/s/not-a-token/", "/s/not-a-token/compare/a/b/"):
        response = quiet_client().get(url)
        assert response.status_code == 404, url
        html = page(response)
        assert "Nothing here" in html, url
        assert not any(marker in html for marker in DEBUG_PAGE_MARKERS), url
    revoked = quiet_client().get("/s/not-a-token/")
    assert "does not exist or was revoked" in page(revoked)


@override_settings(DEBUG=False)
def test_without_debug_a_crash_is_the_plain_page_for_everyone(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    from forklab.web.views import runs

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(runs, "run_context", broken)
    client = quiet_client()
    client.force_login(world.users["bob"])
    response = client.get(f"/runs/{world.runs['research-write']}/")
    assert response.status_code == 500
    assert "Something went wrong" in page(response) and "Traceback" not in page(response)


def test_a_share_link_to_a_run_it_does_not_cover_is_a_404_that_says_so(world: World) -> None:
    token = share_token(world)
    response = Client().get(f"/s/{token}/compare/{world.runs['diamond']}/{world.fork}/")
    assert response.status_code == 404
    assert "behind this share link" in page(response)


def test_a_damaged_fork_link_is_a_400_page_that_says_so(world: World) -> None:
    url = f"/runs/{world.runs['research-write']}/fork/"
    client = world.client("bob")
    bad_point = client.get(url, {"at": "six"})
    assert bad_point.status_code == 400
    assert "This fork link is damaged: its point at=&#x27;six&#x27; is not a seq number" in \
        page(bad_point)
    bad_changes = client.get(url, {"at": 6, "changes": "not-base64-json"})
    assert bad_changes.status_code == 400
    assert "Open the composer at seq 6 without changes" in page(bad_changes)


def test_a_point_past_the_end_says_it_is_past_the_end(world: World) -> None:
    run = world.run(world.runs["research-write"])
    response = world.client("bob").get(f"/runs/{run.id}/fork/", {"at": run.last_seq + 40})
    assert response.status_code == 404
    html = page(response)
    assert f"seq {run.last_seq + 40} is past the end of this run: it has {run.last_seq} events" \
        in html
    assert "the last fork point is seq 11" in html


def test_enter_in_the_sweep_form_posts_it_and_no_button_sends_the_token_in_a_url(
        world: World) -> None:
    html = page(world.client("bob").get(f"/runs/{world.runs['research-write']}/sweep/"))
    form = html.split('id="sweep-form"')[1].split("</form>")[0]
    buttons = re.findall(r"<button[^>]*>", form)
    first_submit = next(b for b in buttons if 'type="submit"' in b)
    assert "name=" not in first_submit and "formmethod" not in first_submit  # Enter: a POST
    assert "formmethod" not in form
    assert 'method="post"' in html.split('id="sweep-form"')[0].rsplit("<form", 1)[1]


def test_choosing_another_agent_in_the_sweep_form_redraws_it_without_starting(
        world: World) -> None:
    url = f"/runs/{world.runs['research-write']}/sweep/"
    response = world.client("bob").post(url, {
        "at": 6, "variants": 2, "target": "research", "refresh": "1",
        "v1-name": "kept", "v1-model": "scripted-large", "v2-name": "other"})
    assert response.status_code == 200
    html = page(response)
    assert 'value="kept"' in html
    assert "You are a careful researcher." in html  # the rows start from the chosen agent
    from forklab.runs.models import Run

    assert not Run.objects.filter(label__in=["kept", "other"]).exists()


@pytest.mark.parametrize("code", sorted(every_error_code() | {"invalid_request",
                                                               "something_new"}))
def test_every_forklab_error_is_an_error_page_at_the_apis_status(code: str) -> None:
    class _Refused(ForklabError):  # "_": not one of the real codes
        pass

    _Refused.code = code

    @page_errors
    def view(request: HttpRequest) -> HttpResponse:
        raise _Refused(f"refused with {code}: do something else")

    request = RequestFactory().get("/somewhere/")
    request.user = AnonymousUser()
    response = view(request)
    assert response.status_code == status_for(code)
    html = page(response)
    assert f"refused with {code}: do something else" in html
    assert f'<div class="code">{status_for(code)}</div>' in html
    assert "Traceback" not in html


def test_a_fork_the_run_cannot_take_is_a_422_page_not_a_crash(world: World) -> None:
    class _Diverged(ForklabError):
        code = "replay_divergence"

    @page_errors
    def view(request: HttpRequest) -> HttpResponse:
        raise _Diverged("the replayed prefix no longer matches the log")

    request = RequestFactory().get("/")
    request.user = world.users["bob"]
    response = view(request)
    assert response.status_code == 422
    assert "This cannot be done" in page(response)
