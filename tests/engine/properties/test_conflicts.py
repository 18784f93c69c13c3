"""Invariant 6 — conflicts are refused, not ordered (SPEC §3.3; semantics "Conflicts").

Two changes in one request that write the same thing fail with ``conflicting_changes``
naming both — at preflight (``prepare_fork``, a dry run) and at fork time — in either order,
before anything is appended. Changes that write different things are accepted.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from forklab.engine import change, fork, prepare_fork
from forklab.engine.errors import ConflictingChanges
from forklab.engine.graph import AgentNode, ApprovalNode, GraphSpec, RouterNode, ToolNode
from tests.engine.properties.changes import agent_targets, memory_keys, router_targets
from tests.engine.properties.graphs import VALUES, Options, graph_cases
from tests.engine.properties.lineage import independent
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case
from tests.engine.properties.world import PRICED_MODELS, Harness, hitl

RICH = Options(segments=("single", "branch", "diamond"),
               singles=("agent", "multi", "multi", "tool", "approval"))


def _agent_change(kind: str, target: str, draw: Any) -> Any:
    if kind == "model":
        return change.model(target, draw(st.sampled_from(PRICED_MODELS)))
    if kind == "prompt":
        return change.prompt(target, draw(st.sampled_from(["One.", "Two.", "Three."])))
    return change.temperature(target, draw(st.sampled_from([0.1, 0.5, 0.9])))


def _multi_roles(graph: GraphSpec) -> list[tuple[str, str, int]]:
    return [(n.id, name, role.count) for n in graph.nodes if isinstance(n, AgentNode) and n.roles
            for name, role in n.ordered_roles()]


ATTRS = st.sampled_from(["model", "prompt", "temperature"])


@st.composite
def conflicting_pairs(draw: Any, graph: GraphSpec, state: Any) -> tuple[str, Any, Any]:
    """(what they both write, change a, change b) for one of the semantics' conflict kinds."""
    tools = [n for n in graph.nodes if isinstance(n, ToolNode)]
    agents = [n for n in graph.nodes if isinstance(n, AgentNode)]
    routers = [n for n in graph.nodes if isinstance(n, RouterNode)]
    options = ["two memory changes", "memory and input patch"]
    options += ["same attribute twice"] * bool(agent_targets(graph))
    options += ["role-wide and instance"] * any(c > 1 for _, _, c in _multi_roles(graph))
    options += ["output and tool", "two tool changes"] * bool(tools)
    options += ["output and agent change", "config and agent change",
                "two config changes"] * bool(agents)
    options += ["two routes"] * bool(routers)
    options += ["two human responses"] * any(isinstance(n, ApprovalNode) for n in graph.nodes)
    kind = draw(st.sampled_from(options))
    attr = draw(ATTRS)
    if kind == "same attribute twice":
        target = draw(st.sampled_from(agent_targets(graph)))
        return kind, _agent_change(attr, target, draw), _agent_change(attr, target, draw)
    if kind == "role-wide and instance":
        node, role, count = draw(st.sampled_from([r for r in _multi_roles(graph) if r[2] > 1]))
        i = draw(st.integers(0, count - 1))
        return (kind, _agent_change(attr, f"{node}.{role}", draw),
                _agent_change(attr, f"{node}.{role}[{i}]", draw))
    if kind == "two memory changes":
        key = draw(st.sampled_from(memory_keys(graph, state)))
        second = change.memory(delete=[key]) if draw(st.booleans()) else change.memory(
            set={key: draw(VALUES)})
        return kind, change.memory(set={key: draw(VALUES)}), second
    if kind == "memory and input patch":
        key = draw(st.sampled_from(sorted(set(state.input) | {"ghost"})))
        return (kind, change.memory(set={key: draw(VALUES)}),
                change.input_patch({key: draw(VALUES)}))
    if kind in ("output and tool", "two tool changes"):
        node = draw(st.sampled_from(tools))
        first = change.output(node.id, {}) if kind == "output and tool" else change.tool(node.id, 1)
        return kind, first, change.tool(node.id, draw(VALUES))
    if kind == "two routes":
        router = draw(st.sampled_from(routers))
        targets = router_targets(router)
        return (kind, change.route(router.id, draw(st.sampled_from(targets))),
                change.route(router.id, draw(st.sampled_from(targets))))
    if kind == "two human responses":
        return kind, change.human_response("approved"), change.human_response("rejected")
    node = draw(st.sampled_from(agents))
    target = node.id if node.roles is None else f"{node.id}.{draw(st.sampled_from(list(node.roles)))}"
    if kind == "output and agent change":
        return kind, change.output(node.id, {}), _agent_change(attr, target, draw)
    if kind == "two config changes":
        return (kind, change.config(node.id, {"prompt": "One"}),
                change.config(node.id, {"prompt": "Two"}))
    agent_change = _agent_change(attr, target, draw)
    field = {"model": "model", "prompt": "system_prompt", "temperature": "temperature"}[attr]
    value = agent_change.wire()[field]
    if node.roles is None:  # the config change sets the very field the agent change sets
        patch: dict[str, Any] = {"agent": {field: value}}
    else:
        role = target.split(".")[1]
        patch = {"roles": {role: {"agent": {field: value}}}}
    return kind, change.config(node.id, patch), agent_change


def _names(item: Any) -> list[str]:
    """What a message naming this change must mention: its kind and what it targets."""
    names = [item.kind]
    for attr in ("target", "node", "source"):
        if isinstance(getattr(item, attr, None), str):
            names.append(getattr(item, attr))
    if item.kind == "memory":
        names.append(next(iter([*item.set, *item.delete])))
    if item.kind == "input_patch":
        names.append(next(iter(item.patch)))
    return names


@examples(60)
@given(case=graph_cases(RICH), data=st.data())
def test_two_changes_writing_the_same_thing_are_refused_at_preflight_and_fork_time_naming_both(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    kind, a, b = data.draw(conflicting_pairs(case.graph, base.state), label="pair")
    assume(a.wire() != b.wire() or kind == "two human responses")
    runs = list(base.store.run_ids())
    for pair in ([a, b], [b, a]):
        for attempt in (lambda p=pair: prepare_fork(base, at="start", change=p),
                        lambda p=pair: fork(base, at="start", change=p, dry_run=True),
                        lambda p=pair: fork(base, at="start", change=p, hitl=hitl)):
            with pytest.raises(ConflictingChanges) as refused:
                attempt()
            message = refused.value.message.replace("_", " ")
            for name in (*_names(a), *_names(b)):
                assert name.replace("_", " ") in message, f"{kind}: {name!r} not named in {message!r}"
    assert list(base.store.run_ids()) == runs, "a refused fork appended a run"


@st.composite
def compatible_pairs(draw: Any, graph: GraphSpec, state: Any) -> tuple[str, Any, Any]:
    """Two changes that write different things (accepted together)."""
    from tests.engine.properties.changes import changes

    options = ["independent", "two memory keys", "memory and another input key"]
    options += ["two attributes of one agent"] * bool(agent_targets(graph))
    options += ["two instances"] * any(c > 1 for _, _, c in _multi_roles(graph))
    kind = draw(st.sampled_from(options))
    if kind == "independent":
        a = draw(changes(graph, state))
        return kind, a, draw(changes(graph, state).filter(lambda c: independent(a, c)))
    if kind == "two attributes of one agent":
        target = draw(st.sampled_from(agent_targets(graph)))
        first, second = draw(st.permutations(["model", "prompt", "temperature"]))[:2]
        return kind, _agent_change(first, target, draw), _agent_change(second, target, draw)
    if kind == "two instances":
        node, role, count = draw(st.sampled_from([r for r in _multi_roles(graph) if r[2] > 1]))
        i, j = draw(st.permutations(range(count)))[:2]
        attr = draw(ATTRS)
        return (kind, _agent_change(attr, f"{node}.{role}[{i}]", draw),
                _agent_change(attr, f"{node}.{role}[{j}]", draw))
    keys = draw(st.permutations(sorted(set(memory_keys(graph, state)) | {"ghost", "other"})))
    if kind == "two memory keys":
        return kind, change.memory(set={keys[0]: 1}), change.memory(delete=[keys[1]])
    return kind, change.memory(set={keys[0]: 1}), change.input_patch({keys[1]: 2})


@examples(40)
@given(case=graph_cases(RICH), data=st.data())
def test_changes_writing_different_things_are_accepted_together(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    kind, a, b = data.draw(compatible_pairs(case.graph, base.state), label="pair")

    plan = prepare_fork(base, at="start", change=[a, b], ignore_budget=True)

    assert [c.wire() for c in plan.changes] == [a.wire(), b.wire()], kind
