"""Edge validation (``forklab.engine.inputs``): what forklab refuses to keep, and where.

Invariants over generated JSON (hypothesis, default profile: 100 examples a property, a
fresh random seed each run; a failure prints the seed to reproduce it): every plain JSON
value within the limits passes; one bad leaf planted anywhere is refused with the path of
that leaf. Plus the examples the issue names, and the engine paths that use the checks
(run input at start, tool results, model replies).
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forklab.engine.environment import Environment
from forklab.engine.errors import InvalidInput
from forklab.engine.graph import parse_graph
from forklab.engine.inputs import (
    MAX_DEPTH,
    MAX_GRAPH_NODES,
    check_graph_document,
    check_json_text,
    check_json_value,
    strict_constant,
)
from forklab.engine.oracle import NodeFailure, ensure_json
from forklab.engine.recording import run_recorded
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.store import MemoryStore

GOOD_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                    max_size=20)
SCALARS = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | GOOD_TEXT)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(GOOD_TEXT, inner, max_size=4), max_leaves=30)
BAD_LEAVES = st.sampled_from([float("nan"), float("inf"), -float("inf"), "a\x00b", "x\ud800",
                              "\udfff", 2**64, {1, 2}, b"bytes"])


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


def step(path: str, key: str | int) -> str:
    """The documented path notation: ``.key`` for identifiers, ``['key']`` else, ``[i]``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if key.isidentifier() and key.isascii() else f"{path}[{key!r}]"


def plant(value: Any, leaf: Any, choices: list[int]) -> tuple[Any, str]:
    """``value`` with ``leaf`` planted at a place chosen by ``choices``; and its path."""
    path = "$"
    holder: Any = {"root": value}
    root, key = holder, "root"
    for choice in choices:
        inner = holder[key]
        if isinstance(inner, dict) and inner:
            next_key: str | int = sorted(inner)[choice % len(inner)]
        elif isinstance(inner, list) and inner:
            next_key = choice % len(inner)
        else:
            break
        path = step(path, next_key)
        holder, key = inner, next_key
    holder[key] = leaf
    return root["root"], path


@given(JSON)
def test_every_plain_json_value_within_the_limits_passes(value: Any) -> None:
    check_json_value(value, where="$")
    check_json_text(json.dumps(value))


@given(JSON, BAD_LEAVES, st.lists(st.integers(0, 10), max_size=6))
def test_one_bad_leaf_anywhere_is_refused_naming_its_path(value: Any, leaf: Any,
                                                         choices: list[int]) -> None:
    planted, path = plant(value, leaf, choices)
    with pytest.raises(InvalidInput) as caught:
        check_json_value(planted, where="$")
    assert caught.value.code == "invalid_input"
    assert caught.value.context["path"] == path
    json.dumps(caught.value.message).encode("utf-8")  # the message itself is always printable


@pytest.mark.parametrize("value, says", [
    ({"goal": float("nan")}, "input.goal: nan is not a finite number"),
    ({"goal": float("inf")}, "input.goal: inf is not a finite number"),
    ({"goal": "x\ud800y"}, "input.goal: the string 'x\\\\ud800y' is not encodable"),
    ({"goal": "nul\x00"}, "input.goal: the string holds a NUL character"),
    ({"a\x00": 1}, "input: an object key holds a NUL character"),
    ({"items": [1, 2, {"deep": [float("-inf")]}]}, "input.items[2].deep[0]: -inf"),
    ({"odd key": [None, "\udc00"]}, "input['odd key'][1]: the string"),
    ({1: "int key"}, "input: object key 1 is an int"),
])
def test_the_error_names_the_path_and_the_problem(value: Any, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_json_value(value, where="input")
    assert caught.value.message.startswith(says)


def test_nesting_is_limited_and_checked_without_recursion() -> None:
    check_json_value(nested(MAX_DEPTH), where="input")
    with pytest.raises(InvalidInput, match=f"nested deeper than {MAX_DEPTH} levels"):
        check_json_value(nested(MAX_DEPTH + 1), where="input")
    with pytest.raises(InvalidInput, match="nested deeper"):
        check_json_value(nested(200_000), where="input")  # no RecursionError


def test_size_is_limited() -> None:
    check_json_value({"text": "x" * 1000}, max_bytes=2000)
    with pytest.raises(InvalidInput, match="larger than 2000 bytes"):
        check_json_value({"text": "x" * 3000}, max_bytes=2000)
    with pytest.raises(InvalidInput, match="larger than 2000 bytes"):
        check_json_value(list(range(1000)), max_bytes=2000)


def test_json_text_nested_thousands_deep_is_refused_before_parsing() -> None:
    text = "[" * 5000 + "]" * 5000
    with pytest.raises(InvalidInput, match="nested deeper than 64 levels"):
        check_json_text(text, where="body")
    check_json_text('{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}')
    with pytest.raises(InvalidInput, match="over the limit of 10"):
        check_json_text("x" * 11, max_bytes=10)


def test_strict_constant_refuses_nan_and_infinity_while_parsing() -> None:
    for text in ('{"goal": NaN}', "[Infinity]", "-Infinity"):
        with pytest.raises(InvalidInput, match="is not valid JSON"):
            json.loads(text, parse_constant=strict_constant)


def test_graph_size_limits_are_stated_and_checked() -> None:
    nodes = [{"id": f"n{i}", "kind": "tool", "tool": "x"} for i in range(MAX_GRAPH_NODES + 1)]
    with pytest.raises(InvalidInput, match=f"over the limit of {MAX_GRAPH_NODES}"):
        check_graph_document({"id": "big", "start": "n0", "nodes": nodes})
    with pytest.raises(InvalidInput, match=r"graph\.nodes\[0\]\.tool"):
        check_graph_document({"id": "g", "start": "n", "nodes": [{"id": "n", "tool": "\x00"}]})


def test_a_ten_thousand_node_chain_validates_without_recursion() -> None:
    count = 10_000
    spec = {"id": "chain", "start": "n0",
            "nodes": [{"id": f"n{i}", "kind": "router", "default": "end"} for i in range(count)],
            "edges": [{"from": f"n{i}", "to": f"n{i + 1}"} for i in range(count - 1)]}
    check_graph_document(spec)
    assert len(parse_graph(spec).nodes) == count
    spec["edges"].append({"from": f"n{count - 1}", "to": "n0"})
    with pytest.raises(Exception, match="contains a cycle"):
        parse_graph(spec)


def test_a_run_input_that_cannot_be_stored_is_refused_before_anything_is_appended() -> None:
    store = MemoryStore()
    scenario = SCENARIOS["research-web"]
    for bad in ({**scenario.input, "topic": "\ud83d"}, {"topic": math.nan},
                nested(MAX_DEPTH + 5)):
        with pytest.raises(InvalidInput):
            run_recorded(scenario.graph(), bad, store=store, run_id="refused")
        assert store.read("refused") == [] and store.last_seq("refused") == 0


def test_a_tool_result_that_cannot_be_stored_fails_the_node_not_the_append() -> None:
    for result, code in ((float("nan"), "invalid_input"), ({"x": "a\x00"}, "invalid_input"),
                         (nested(100), "invalid_input"), ({"x": object()}, "non_json_result")):
        with pytest.raises(NodeFailure) as caught:
            ensure_json(result, "tool 'fetch' result")
        assert caught.value.error["type"] == code
    assert ensure_json({"t": (1, 2)}, "tool 'fetch' result") == {"t": [1, 2]}


def test_a_model_reply_that_cannot_be_stored_fails_the_node_and_the_run_is_finished() -> None:
    from forklab.engine.providers import ChatResponse, ProviderRegistry

    class Hostile:
        name = "scripted"

        def complete(self, request: Any) -> ChatResponse:
            return ChatResponse(text="bad \ud800 reply", input_tokens=1, output_tokens=1)

    providers = ProviderRegistry()
    providers.register(Hostile())
    scenario = SCENARIOS["research-web"]
    recorded = run_recorded(scenario.graph(), scenario.input, store=MemoryStore(),
                            env=Environment(providers=providers))
    assert recorded.state.status == "failed"
    assert recorded.state.error is not None and recorded.state.error["type"] == "invalid_input"
    assert "not encodable" in recorded.state.error["message"]


@pytest.mark.parametrize("result", [float("nan"), {"text": "bad \udc80"}, {"text": "nul\x00"}])
def test_a_tool_returning_what_no_store_can_keep_fails_its_run_cleanly(result: Any) -> None:
    """The run ends ``failed`` with ``invalid_input`` recorded; nothing raises, nothing
    unstorable is appended (a store refusing it would leave the run ``running``)."""
    from forklab.engine.graph import parse_graph

    env = Environment()
    env.tools.register("tests.hostile_tool", lambda args, ctx: result)
    graph = parse_graph({"id": "hostile", "start": "fetch", "nodes": [
        {"id": "fetch", "kind": "tool", "tool": "tests.hostile_tool", "writes": ["page"]}]})
    recorded = run_recorded(graph, {}, store=MemoryStore(), env=env)
    assert recorded.state.status == "failed"
    assert recorded.state.error is not None and recorded.state.error["type"] == "invalid_input"
    for event in recorded.event_log:
        check_json_value(event.to_wire(), where="event")  # every stored event is storable
