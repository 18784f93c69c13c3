"""The dashboard's pure pieces: word diffs, graph layout, form errors, formatting, timeline."""

from __future__ import annotations

import pytest
from django.http import QueryDict

from forklab.engine.errors import ConflictingChanges, InvalidChange, LiveBudgetExceeded
from forklab.engine.fork.changes import parse_change
from forklab.engine.scenarios import SCENARIOS
from forklab.runs.access import PermissionDenied
from forklab.web import graphpic
from forklab.web.forkform import ForkForm, field_for
from forklab.web.templatetags.forklab import ms, num, usd
from forklab.web.textdiff import Piece, similarity, word_diff


def test_a_word_diff_keeps_words_and_marks_what_changed() -> None:
    assert word_diff("the quick fox", "the slow fox") == [
        Piece("same", "the "), Piece("del", "quick"), Piece("ins", "slow"), Piece("same", " fox")]
    assert word_diff({"a": 1}, {"a": 2})[-2:] == [Piece("ins", "2"), Piece("same", "\n}")]
    assert similarity("a b c", "a b c") == 1.0 and similarity("", "x") == 0.0


def test_the_graph_picture_lays_nodes_in_layers_and_draws_loops_under_them() -> None:
    graph = SCENARIOS["review-loop"].graph()
    path = ["draft", "review", "gate", "revise", "review", "gate"]
    pic = graphpic.picture(graph, path, current="gate")
    x = {n.id: n.x for n in pic.nodes}
    assert x["draft"] < x["review"] < x["gate"] < x["revise"]
    assert {n.id: n.count for n in pic.nodes}["review"] == 2
    assert [e.kind for e in pic.edges].count("loop") == 1
    assert next(n for n in pic.nodes if n.id == "gate").current
    assert "end" in {n.id for n in pic.nodes}  # the router can end the run


def form_with(*origins: tuple[dict[str, object], str]) -> ForkForm:
    form = ForkForm(max_live_calls=5, max_cost_usd=1.0)
    for change, origin in origins:
        form.add(origin, parse_change, change)
    return form


def test_engine_errors_map_to_the_field_that_caused_them() -> None:
    prompt = ({"kind": "prompt", "target": "write", "system_prompt": "x"}, "agent-1-prompt")
    memory = ({"kind": "memory", "set": {"k": 1}}, "memory_set")
    extra = ({"kind": "memory", "set": {"k": 2}}, "extra_changes")
    form = form_with(prompt, memory, extra)
    assert field_for(InvalidChange("bad", kind="prompt", target="write"), form) == \
        "agent-1-prompt"
    assert field_for(ConflictingChanges("two", key=["memory", "k"]), form) == "extra_changes"
    assert field_for(LiveBudgetExceeded("over", estimate={"live_calls": 9}), form) == \
        "max_live_calls"
    assert field_for(LiveBudgetExceeded("over", estimate={"live_calls": 1}), form) == \
        "max_cost_usd"
    denied = PermissionDenied("no", reasons=["allowing a write"])
    assert field_for(denied, form) == "side_effects"
    assert field_for(PermissionDenied("no"), form) == "form"


@pytest.mark.parametrize(("value", "text"), [(None, "unpriced"), (0, "$0"), (0.0021, "$0.0021"),
                                             (0.00000123, "$0.000001"), (-0.5, "-$0.5000")])
def test_money_reads_as_dollars(value: float | None, text: str) -> None:
    assert usd(value) == text


def test_durations_and_counts_read_well() -> None:
    assert [ms(0.5), ms(12.4), ms(1500), ms(125_000)] == ["0.50 ms", "12 ms", "1.5 s", "2m 05s"]
    assert num(1234567) == "1,234,567"


def test_an_unparsable_fork_form_names_its_fields() -> None:
    from forklab.web.forkform import _json

    form = ForkForm()
    data = QueryDict("memory_set=%7Bx&input_patch=%5B%5D")
    assert _json(form, data, "memory_set", want=dict) is None
    assert _json(form, data, "input_patch", want=dict) is None
    assert form.errors["memory_set"].startswith("not valid JSON")
    assert form.errors["input_patch"] == "expected a JSON object {…}, got a list"


def _crosses(x: float, y_from: float, y_to: float, node: graphpic.PicNode) -> bool:
    top, bottom = min(y_from, y_to), max(y_from, y_to)
    inside_x = node.x <= x <= node.x + graphpic.NODE_W
    return inside_x and not (bottom <= node.y or top >= node.y + graphpic.NODE_H)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_no_loop_is_drawn_through_another_node_end_included(scenario: str) -> None:
    import re

    graph = SCENARIOS[scenario].graph()
    pic = graphpic.picture(graph, [])
    for edge in (e for e in pic.edges if e.kind == "loop"):
        x1, y1, _, low, x2, _, _, y2 = map(float, re.findall(r"-?[\d.]+", edge.path)[:8])
        ends = [n for n in pic.nodes if _crosses(x1, y1, low, n) or _crosses(x2, y2, low, n)]
        assert not ends, f"{scenario}: a loop passes through {[n.id for n in ends]}"


def test_the_review_loops_back_edge_clears_the_end_node() -> None:
    pic = graphpic.picture(SCENARIOS["review-loop"].graph(), [])
    where = {n.id: n for n in pic.nodes}
    assert where["end"].x == where["revise"].x  # one column …
    assert where["end"].y < where["revise"].y  # … end on top, the loop's source below it
