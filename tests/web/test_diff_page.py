"""The diff says what changed and where: each change old → new at the top, the path strip
centred on the first divergence, steps a stopped variant never reached, a legend for every
label, and any two runs compared from the runs list."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any

import pytest

from forklab.engine.actions import ToolResult
from forklab.engine.fork.changes import parse_changes
from forklab.engine.fork.wire import RunDiffWire
from forklab.engine.graph import load_graph
from forklab.engine.state import Execution
from forklab.runs import queries, readcache
from forklab.runs.models import ForkResult
from forklab.web.changeview import Before, describe, input_changes
from forklab.web.diffview import STRIP_STEPS, path_strip
from forklab.web.views.home import grouped
from tests.web.conftest import World, page, step

pytestmark = pytest.mark.django_db


def test_a_prompt_change_is_shown_old_to_new_word_by_word_at_the_top(world: World) -> None:
    html = page(world.client("bob").get(f"/compare/{world.runs['research-write']}/"
                                        f"{world.fork}/"))
    top = html.split('id="changes-h"')[1].split("</section>")[0]
    assert "What the fork changed" in top and "system prompt of write" in top
    assert "<del>You are a science writer. </del>" in top and "<ins>poem</ins>" in top
    assert html.index('id="changes-h"') < html.index('id="path-h"')


def test_a_finished_forks_diff_page_shows_its_stored_diff_without_diffing_again(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fork's stored result was diffed against this very base (its last seq): the page
    shows that diff — equal to diffing both final states now — and computes none."""
    base, fork = world.run(world.runs["research-write"]), world.run(world.fork)
    queries.clear_caches()
    computed = RunDiffWire.from_wire(readcache.run_diff(base, fork).wire())
    stored = queries.fork_result(fork)
    assert stored is not None and stored.base_version == base.last_seq
    assert stored.diff_against(base.last_seq) == computed
    assert stored.diff_against(base.last_seq + 1) is None
    assert stored.diff is not None and stored.diff.to_wire() == computed.to_wire()

    def no_diff(*_: Any) -> None:
        raise AssertionError("a finished fork's diff page diffed its runs again")

    queries.clear_caches()
    monkeypatch.setattr(readcache, "run_diff", no_diff)
    response = world.client("bob").get(f"/compare/{base.id}/{fork.id}/")
    assert response.status_code == 200 and response.context["diff"] == computed


def test_a_forks_diff_page_diffs_again_once_its_base_is_not_where_its_result_was_stored(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    base, fork = world.run(world.runs["research-write"]), world.run(world.fork)
    queries.fork_result(fork)  # stored
    row = ForkResult.objects.get(run_id=fork.id)
    ForkResult.objects.filter(run_id=fork.id).update(
        result={**row.result, "base_version": base.last_seq - 1})
    queries.clear_caches()
    diffed = []
    real = readcache.run_diff
    monkeypatch.setattr(readcache, "run_diff", lambda b, v: diffed.append(v.id) or real(b, v))
    response = world.client("bob").get(f"/compare/{base.id}/{fork.id}/")
    assert response.status_code == 200 and diffed == [fork.id]
    assert response.context["diff"] == RunDiffWire.from_wire(real(base, fork).wire())
    queries.clear_caches()


def test_the_path_strip_is_centred_on_the_first_divergence() -> None:
    aligned = [step("same", f"n{i}") for i in range(500)]
    aligned[300] = step("changed", "n300")
    strip = path_strip(aligned, 300)
    indexes = [s.index for s in strip.steps]
    assert len(indexes) == STRIP_STEPS and 300 in indexes
    assert indexes[0] == 300 - STRIP_STEPS // 2
    assert strip.before == indexes[0] and strip.after == 500 - indexes[-1] - 1
    assert path_strip(aligned[:10], None).steps[0].index == 0
    assert [s.index for s in path_strip(aligned, 499).steps][-1] == 499


def test_a_fork_that_stopped_early_shows_not_reached_steps(world: World) -> None:
    base = world.runs["order-fulfilment"]
    html = page(world.client("bob").get(f"/compare/{base}/{world.paused_fork}/"))
    assert "2 not reached" in html  # the gate it waits at has not finished either
    assert re.search(r'class="step op-not_reached"[^>]*>\?send_email</a>', html)
    assert "not reached</span>" in html.split('id="path"')[1]


def test_a_cancelled_forks_diff_page_shows_not_reached_steps_not_its_stored_skips(
        world: World) -> None:
    """A fork that stopped early has a stored result too, but its stored (SPEC §4.6) diff
    leaves out the dashboard's "not reached" marks: the page diffs again rather than show
    those steps as skipped."""
    base = world.runs["order-fulfilment"]
    assert world.client("bob").post(f"/forks/{world.paused_fork}/cancel/").status_code == 302
    fork = world.run(world.paused_fork)
    assert fork.status == "cancelled" and queries.fork_result(fork) is not None
    html = page(world.client("bob").get(f"/compare/{base}/{world.paused_fork}/"))
    assert re.search(r'class="step op-not_reached"[^>]*>\?send_email</a>', html)
    assert "not reached</span>" in html.split('id="path"')[1]
    queries.clear_caches()


def test_every_label_has_a_legend_on_the_run_and_diff_pages(world: World) -> None:
    client = world.client("bob")
    for url in (f"/runs/{world.fork}/", f"/compare/{world.runs['research-write']}/{world.fork}/"):
        legend = page(client.get(url)).split('class="legend-labels"')[1].split("</details>")[0]
        for label in ("live", "reused", "changed", "simulated", "blocked", "memo"):
            assert f'class="label label-{label}">{label}<' in legend, (url, label)


def test_two_ticked_runs_open_their_diff_base_first(world: World) -> None:
    client = world.client("bob")
    home = page(client.get("/"))
    assert 'form="compare-form"' in home and 'id="compare-form" method="get"' in home
    base, fork = world.runs["research-write"], world.fork
    for order in ((base, fork), (fork, base)):
        response = client.get("/compare/", {"run": list(order)})
        assert response.status_code == 302 and response["Location"] == f"/compare/{base}/{fork}/"
    other = world.runs["diamond"]
    response = client.get("/compare/", {"run": [other, base]})
    older, newer = sorted([world.run(other), world.run(base)], key=lambda r: r.created_at)
    assert response["Location"] == f"/compare/{older.id}/{newer.id}/"
    arbitrary = page(client.get(response["Location"]))
    assert "How the inputs differ" in arbitrary and "compared with" in arbitrary
    one = client.get("/compare/", {"run": [base]})
    assert one.status_code == 400 and "Tick exactly two runs" in page(one)
    hidden = client.get("/compare/", {"run": [base, world.other_run]})
    assert hidden.status_code == 404


def test_forks_sit_under_their_base_with_what_their_tail_incurred(world: World) -> None:
    html = page(world.client("bob").get("/"))
    base_at = html.index(f'id="run-{world.runs["research-write"]}"')
    fork_row = html.split(f'id="run-{world.fork}"')[1].split("</tr>")[0]
    assert html.index(f'id="run-{world.fork}"') > base_at
    assert f'<tr id="run-{world.fork}" class="forkrow" data-depth="1">' in html
    assert re.search(r"\$[\d.]+ incurred", fork_row)


class _Run:
    def __init__(self, id: str, parent: str | None, created: int) -> None:
        self.id, self.parent_run_id, self.created_at = id, parent, created


def test_grouping_puts_each_fork_under_its_base_depth_first() -> None:
    runs = [_Run("f2", "a", 5), _Run("ff", "f1", 4), _Run("f1", "a", 3), _Run("b", None, 2),
            _Run("a", None, 1), _Run("orphan", "gone", 0)]
    assert [(r.id, d) for r, d in grouped(runs)] == [  # type: ignore[arg-type]
        ("b", 0), ("a", 0), ("f1", 1), ("ff", 2), ("f2", 1), ("orphan", 0)]


def _ex(node: str, writes: dict, actions: list | None = None, route: str | None = None,
        kind: str = "tool") -> Execution:
    return Execution(node=node, kind=kind, occurrence=1, iteration=1, start_seq=1,
                     fingerprint="", reads={}, started_at=0.0, status="completed",
                     writes=writes, actions=actions or [], route=route)


def test_each_change_kind_shows_what_the_base_had_before_it() -> None:
    graph = load_graph("forklab/engine/scenarios/triage-router.yaml")
    before = Before(graph=graph, memory={"category": "billing", "ticket": "t"},
                    input={"ticket": "t"}, after_point=[
                        _ex("route", {}, route="reply", kind="router"),
                        _ex("escalate", {"page": {"paged": "x"}},
                            [ToolResult(seq=2, result={"page": {"paged": "x"}},
                                        label="live")])])
    views = describe(parse_changes([
        {"kind": "model", "target": "reply", "model": "gpt-4o"},
        {"kind": "temperature", "target": "reply", "temperature": 1.1},
        {"kind": "memory", "set": {"category": "urgent"}, "delete": ["ticket"]},
        {"kind": "route", "from": "route", "to": "escalate", "once": True},
        {"kind": "tool", "node": "escalate", "result": {"page": {"paged": "y"}}},
        {"kind": "output", "node": "escalate", "memory": {"page": None}},
        {"kind": "input_patch", "patch": {"ticket": "new", "extra": 1}},
        {"kind": "config", "node": "reply", "patch": {"prompt": "Be brief: {ticket}"}},
    ]), before)
    flat = [(v.kind, line.name, htmllib.unescape(re.sub("<[^>]+>", "", line.old)),
             htmllib.unescape(re.sub("<[^>]+>", "", line.new))) for v in views for line in v.lines]
    assert ("model", "model", "scripted-small", "gpt-4o") in flat
    assert ("temperature", "temperature", "0.4", "1.1") in flat
    assert ("memory", "category", "billing", "urgent") in flat
    assert ("memory", "ticket (deleted)", "t", "(absent)") in flat
    assert ("route", "next node", "reply", "escalate") in flat
    assert ("input_patch", "extra", "(absent)", "1") in flat
    assert ("config", "prompt", "Reply to this {category} ticket: {ticket}",
            "Be brief: {ticket}") in flat
    tool = next(line for v in views if v.kind == "tool" for line in v.lines)
    plain = [htmllib.unescape(re.sub("<[^>]+>", "", t)) for t in (tool.old, tool.new)]
    assert '"paged": "x"' in plain[0] and '"paged": "y"' in plain[1]
    assert input_changes({"a": 1}, {"a": 1}).lines == []
    assert [line.name for line in input_changes({"a": 1}, {"a": 2, "b": 0}).lines] == ["a", "b"]
