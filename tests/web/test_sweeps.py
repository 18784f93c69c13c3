"""Sweeps: the launcher (fields, estimate, start) and the variants-by-outcome matrix."""

from __future__ import annotations

import re

import pytest

from forklab.runs.models import Run
from tests.web.conftest import HTMX, World, htmx, page

pytestmark = pytest.mark.django_db


def launcher(world: World) -> str:
    return f"/runs/{world.runs['research-write']}/sweep/"


def variants(**rows: str) -> dict[str, str]:
    data = {"at": "6", "variants": "3", "target": "write"}
    for i, (name, prompt) in enumerate(rows.items(), start=1):
        data[f"v{i}-name"] = name
        data[f"v{i}-model"] = "scripted-large"
        data[f"v{i}-temperature"] = "0.7"
        data[f"v{i}-prompt"] = prompt
    return data


def test_the_launcher_starts_three_variants_from_the_current_agent(world: World) -> None:
    html = page(world.client("bob").get(launcher(world), {"at": 6}))
    assert html.count('name="v1-name"') == 1 and 'name="v3-prompt"' in html
    assert html.count("You are a science writer.") == 3
    assert "+ add a variant" in html and "variants=4" in html
    assert world.client("vera").get(launcher(world), {"at": 6}).status_code == 403
    assert world.client("eve").get(launcher(world), {"at": 6}).status_code == 404


def test_the_estimate_covers_every_named_variant(world: World) -> None:
    html = page(world.client("bob").post(
        f"{launcher(world)}estimate/", variants(a="Short.", b="Long."), headers=HTMX))
    assert "a: 1 live calls" in html and "b: 1 live calls" in html
    assert "<dd>2</dd>" in html  # the third row has no name: it is left out


def test_starting_a_sweep_records_one_queued_fork_per_variant(world: World) -> None:
    response = world.client("bob").post(launcher(world), variants(
        control="You are a science writer. Write a clear, friendly explanation.",
        short="One sentence only."))
    assert response.status_code == 302
    group = re.fullmatch(r"/sweeps/(\w+)/", response["Location"]).group(1)  # type: ignore[union-attr]
    runs = {r.label: r for r in Run.objects.filter(fork_group_id=group)}
    assert set(runs) == {"control", "short"}
    assert runs["control"].fork_mutations == [] and runs["short"].fork_mutations[0]["kind"] == \
        "prompt"
    matrix = page(world.client("bob").get(response["Location"]))
    assert 'hx-trigger="every 1500ms"' in matrix  # unfinished: the matrix polls


def test_duplicate_or_missing_names_are_refused_in_place(world: World) -> None:
    data = variants(same="x", other="y")
    data["v2-name"] = "same"
    response = world.client("bob").post(launcher(world), data)
    assert response.status_code == 422 and "two variants are named &#x27;same&#x27;" in \
        page(response)
    empty = world.client("bob").post(launcher(world), {"at": "6", "variants": "1",
                                                       "v1-name": ""})
    assert "name at least one variant" in page(empty)


def test_the_matrix_links_every_finished_cell_to_its_diff(world: World) -> None:
    html = page(world.client("bob").get(f"/sweeps/{world.sweep}/"))
    base = world.runs["research-write"]
    for variant in Run.objects.filter(fork_group_id=world.sweep):
        row = html.split(f'data-variant="{variant.label}"')[1].split("</tr>")[0]
        assert f'href="/compare/{base}/{variant.id}/"' in row
        assert 'data-status="completed"' in html
    assert "all finished" in html and "every 1500ms" not in html
    assert '<th class="mono">draft</th>' in html
    partial = page(world.client("bob").get(f"/sweeps/{world.sweep}/", headers=htmx("matrix")))
    assert partial.lstrip().startswith('<section id="matrix"')
    assert world.client("eve").get(f"/sweeps/{world.sweep}/").status_code == 404


def test_the_launcher_names_the_end_point_as_the_api_does(world: World) -> None:
    import html as htmllib

    client = world.client("bob")
    run_id = world.runs["research-write"]
    end = client.get(f"/api/v1/runs/{run_id}/fork-points/").json()[-1]
    assert end["kind"] == "end"
    html = page(client.get(launcher(world), {"at": end["seq"]}))
    shown = htmllib.unescape(html.split('<p class="sub">')[1].split(" of research-write")[0])
    assert shown == end["label"]
