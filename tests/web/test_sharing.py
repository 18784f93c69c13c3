"""Share links: admins create and revoke them; the token alone reads the target read-only."""

from __future__ import annotations

import re

import pytest

from forklab.engine.errors import ForklabError
from forklab.runs import sharing
from forklab.runs.models import Run, ShareLink
from tests.web.conftest import HTMX, World, page

pytestmark = pytest.mark.django_db


def share(world: World, who: str = "demo", **target: str) -> str:
    """Create a link through the page; returns its URL path."""
    response = world.client(who).post("/shares/", target, headers=HTMX)
    assert response.status_code == 200, page(response)[:300]
    return re.search(r'value="http://testserver(/s/[\w-]+/)"', page(response)).group(1)  # type: ignore[union-attr]


def test_a_run_share_reads_logged_out_without_any_fork_control(world: World) -> None:
    url = share(world, kind="run", run=world.runs["research-write"])
    html = page(world.client(None).get(url))
    assert "Read-only shared view" in html and "research-write" in html
    for control in ("Fork…", "Sweep…", "Share read-only", 'id="composer"', "Start fork",
                    "/fork/", "Forks and lineage"):
        assert control not in html
    point = page(world.client(None).get(url, {"at": 6}))
    assert "State at seq 6" in point and 'id="composer"' not in point


def test_a_point_share_opens_at_its_point(world: World) -> None:
    url = share(world, kind="point", run=world.runs["research-write"], seq="6")
    html = page(world.client(None).get(url))
    assert "State at seq 6" in html and "at one fork point" in html


def test_a_diff_share_and_a_sweep_share_link_only_inside_the_share(world: World) -> None:
    base = world.runs["research-write"]
    diff = page(world.client(None).get(share(world, kind="diff", base=base,
                                                    variant=world.fork)))
    assert "write@fork" in diff and "Read-only shared view of a forklab diff" in diff
    assert "Fork this fork" not in diff and f'href="/runs/{base}/"' not in diff
    url = share(world, kind="sweep", group=world.sweep)
    matrix = page(world.client(None).get(url))
    cells = set(re.findall(r'href="(/s/[\w-]+/compare/\w+/\w+/)"', matrix))
    assert len(cells) == 2
    for cell in cells:
        assert "What became different" in page(world.client(None).get(cell))
    run_share = share(world, kind="run", run=base)
    token = run_share.split("/")[2]
    assert world.client(None).get(
        f"/s/{token}/compare/{base}/{world.fork}/").status_code == 404


def test_revoking_a_link_makes_it_404_at_once(world: World) -> None:
    url = share(world, kind="run", run=world.runs["diamond"])
    token = url.split("/")[2]
    assert world.client(None).get(url).status_code == 200
    response = world.client("demo").post(f"/shares/{token}/revoke/", headers=HTMX)
    assert '<span class="status status-cancelled">revoked</span>' in page(response)  # its row
    assert world.client(None).get(url).status_code == 404
    assert world.client("demo").post(f"/shares/{token}/revoke/").status_code == 302  # again: ok


def test_only_admins_create_list_and_revoke_links(world: World) -> None:
    run = world.runs["research-write"]
    assert world.client("bob").post("/shares/", {"kind": "run", "run": run}).status_code == 403
    assert world.client("bob").get("/shares/").status_code == 403
    assert world.client("eve").post("/shares/", {"kind": "run", "run": run}).status_code == 404
    url = share(world, kind="run", run=run)
    token = url.split("/")[2]
    assert world.client("bob").post(f"/shares/{token}/revoke/").status_code == 403
    assert world.client("eve").post(f"/shares/{token}/revoke/").status_code == 404
    listing = page(world.client("demo").get("/shares/"))
    assert token in listing and "Revoke" in listing


@pytest.mark.parametrize("target", [{"kind": "bogus"}, {"kind": ""},
                                    {"kind": "point", "seq": "abc"}])
def test_a_share_the_use_case_refuses_is_a_400_page_with_its_reason(
        world: World, target: dict[str, str]) -> None:
    response = world.client("demo").post("/shares/", {**target, "run": world.runs["diamond"]})
    assert response.status_code == 400
    assert ("share kind" in page(response)) or ("seq" in page(response))


def test_the_share_use_cases_check_their_targets(world: World) -> None:
    admin = world.users["demo"]
    with pytest.raises(ForklabError) as unknown:
        sharing.create_share(user=admin, kind="film", target={})
    assert unknown.value.code == "invalid_argument"
    with pytest.raises(ForklabError) as elsewhere:
        sharing.create_share(user=admin, kind="run", target={"run": world.other_run})
    assert elsewhere.value.code == "not_found"
    with pytest.raises(ForklabError) as mixed:
        sharing.create_share(user=world.users["eve"], kind="diff",
                             target={"base": world.other_run, "variant": world.fork})
    assert mixed.value.code == "not_found"
    link = sharing.create_share(user=admin, kind="point",
                                target={"run": world.runs["diamond"], "seq": "3"})
    assert link.target == {"run": world.runs["diamond"], "seq": 3}
    assert sharing.resolve_share(link.token) == link
    assert sharing.shared_run(link, world.runs["diamond"]).id == world.runs["diamond"]
    with pytest.raises(ForklabError):
        sharing.shared_run(link, world.fork)  # not what the link shows
    sharing.revoke_share(user=admin, token=link.token)
    with pytest.raises(ForklabError):
        sharing.resolve_share(link.token)
    assert ShareLink.objects.get(pk=link.pk).revoked_at is not None
    assert Run.objects.filter(pk=world.fork).exists()


@pytest.mark.parametrize(("seq", "says"), [
    ("-1", "seq=-1 is before this run&#x27;s first event"),
    ("0", "seq=0 is before this run&#x27;s first event"),
    ("9999", "seq=9999 is past the end of this run: it has seq 1 to"),
    ("1.5", "seq=&#x27;1.5&#x27; is not a seq number"),
    ("", "seq=&#x27;&#x27; is not a seq number"),
])
def test_a_point_share_of_a_seq_the_run_does_not_have_is_refused_with_a_400_page(
        world: World, seq: str, says: str) -> None:
    response = world.client("demo").post("/shares/", {"kind": "point", "seq": seq,
                                                      "run": world.runs["diamond"]})
    assert response.status_code == 400
    assert says in page(response)
    assert not ShareLink.objects.filter(target_kind="point").exists()


@pytest.mark.parametrize("seq", [-1, 0, 9999, "x", 1.5, None])
def test_a_stored_point_share_whose_seq_is_not_in_the_run_is_a_404_page_that_says_so(
        world: World, seq: object) -> None:
    run = world.run(world.runs["research-write"])
    link = ShareLink.objects.create(project=run.project, token=f"broken-{seq}",
                                    target_kind="point", target={"run": run.id, "seq": seq},
                                    created_by=world.users["demo"])
    response = world.client(None).get(f"/s/{link.token}/")
    assert response.status_code == 404
    html = page(response)
    assert "this share link points at no position in the run" in html
    assert "Traceback" not in html


@pytest.mark.parametrize("seq", [1.5, True, "\u0663", " 3", "1_0"])
def test_the_point_share_use_case_takes_only_whole_ascii_seq_numbers(
        world: World, seq: object) -> None:
    with pytest.raises(ForklabError) as refused:
        sharing.create_share(user=world.users["demo"], kind="point",
                             target={"run": world.runs["diamond"], "seq": seq})
    assert refused.value.code == "invalid_argument"
    assert refused.value.context["field"] == "seq"
