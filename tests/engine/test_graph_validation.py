"""Bad graphs are refused with a stable code and a message naming the node and the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.errors import GraphValidationError, UnboundedCycleError, UnknownNodeReference
from forklab.engine.graph import graph_json_schema, load_graph, loads_graph, parse_graph
from forklab.engine.recording import run_recorded
from forklab.engine.scenarios import SCENARIOS

AGENT = {"model": "scripted-small", "system_prompt": "Be brief."}


def valid_graph() -> dict[str, Any]:
    """research -> gate -> write, with an approval whose rejection goes back to research."""
    return {
        "id": "g",
        "start": "research",
        "agents": {"writer": AGENT},
        "nodes": [
            {"id": "research", "kind": "agent", "agent": AGENT, "reads": ["goal"],
             "writes": ["notes"], "prompt": "Research {goal}"},
            {"id": "gate", "kind": "router", "reads": ["notes"],
             "rules": [{"when": [{"key": "notes", "op": "exists"}], "to": "write"}],
             "default": "end"},
            {"id": "write", "kind": "agent", "agent": "writer", "reads": ["notes"],
             "writes": ["draft"], "prompt": "Write from {notes}"},
            {"id": "ok", "kind": "approval", "reads": ["draft"], "on_reject": "end"},
        ],
        "edges": [{"from": "research", "to": "gate"}, {"from": "write", "to": "ok"}],
    }


def node(data: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(n for n in data["nodes"] if n["id"] == node_id)


def refused(data: Any, error: type[GraphValidationError] = GraphValidationError) -> GraphValidationError:
    with pytest.raises(GraphValidationError) as info:
        parse_graph(data)
    assert type(info.value) is error, f"{type(info.value).__name__}: {info.value.message}"
    return info.value


def test_the_valid_fixture_graph_and_every_scenario_parse() -> None:
    assert parse_graph(valid_graph()).node_ids() == ["research", "gate", "write", "ok"]
    for scenario in SCENARIOS.values():
        graph = scenario.graph()
        assert parse_graph(graph.to_wire()) == graph


# -- text and shape --------------------------------------------------------------------------


def test_invalid_yaml_text_is_refused_as_an_invalid_graph() -> None:
    with pytest.raises(GraphValidationError) as info:
        loads_graph("id: g\nnodes: [", fmt="yaml")
    assert info.value.code == "invalid_graph"
    assert "not valid YAML" in info.value.message


def test_invalid_json_text_is_refused_as_an_invalid_graph() -> None:
    with pytest.raises(GraphValidationError) as info:
        loads_graph('{"id": "g",', fmt="json")
    assert info.value.code == "invalid_graph"
    assert "not valid JSON" in info.value.message


@pytest.mark.parametrize("data", [[1, 2], "a graph", None, 3])
def test_a_graph_that_is_not_a_mapping_is_refused_naming_what_it_got(data: Any) -> None:
    error = refused(data)
    assert error.code == "invalid_graph"
    assert "mapping" in error.message and type(data).__name__ in error.message


def test_missing_top_level_fields_are_each_named() -> None:
    error = refused({"id": "g"})
    assert "field 'start'" in error.message and "field 'nodes'" in error.message
    assert {tuple(e["loc"]) for e in error.context["errors"]} == {("start",), ("nodes",)}


def test_a_node_missing_a_required_field_names_the_node_and_the_field() -> None:
    data = valid_graph()
    data["nodes"].append({"id": "fetch", "kind": "tool"})
    error = refused(data)
    assert "node 'fetch', field 'tool'" in error.message


def test_an_unknown_node_kind_names_the_node_and_the_kind_field() -> None:
    data = valid_graph()
    node(data, "write")["kind"] = "robot"
    error = refused(data)
    assert error.code == "invalid_graph"
    assert "node 'write', field 'kind'" in error.message and "'robot'" in error.message


def test_an_unknown_field_on_a_node_is_refused() -> None:
    data = valid_graph()
    node(data, "ok")["timeout"] = 30
    assert "node 'ok', field 'timeout'" in refused(data).message


def test_duplicate_node_ids_are_refused_naming_the_id() -> None:
    data = valid_graph()
    data["nodes"].append(copy.deepcopy(node(data, "write")))
    error = refused(data)
    assert "field 'nodes'" in error.message and "'write' is used twice" in error.message


# -- references ------------------------------------------------------------------------------


def test_an_edge_to_an_unknown_node_names_the_edge_field_and_the_node() -> None:
    data = valid_graph()
    data["edges"].append({"from": "gate", "to": "publish"})
    error = refused(data, UnknownNodeReference)
    assert error.code == "unknown_node"
    assert "edges[2], field 'to': unknown node 'publish'" in error.message
    assert error.context["field"] == "edges[2].to"


def test_an_edge_from_an_unknown_node_is_refused() -> None:
    data = valid_graph()
    data["edges"].insert(0, {"from": "ghost", "to": "gate"})
    error = refused(data, UnknownNodeReference)
    assert "edges[0], field 'from': unknown node 'ghost'" in error.message


def test_an_unknown_start_node_is_refused() -> None:
    data = valid_graph()
    data["start"] = "begin"
    error = refused(data, UnknownNodeReference)
    assert error.code == "unknown_node"
    assert "field 'start': unknown node 'begin'" in error.message


@pytest.mark.parametrize(("field", "patch"), [
    ("rules[0].to", lambda n: n["rules"][0].update(to="publish")),
    ("default", lambda n: n.update(default="publish")),
])
def test_a_router_target_that_does_not_exist_names_the_router_and_the_field(field, patch) -> None:
    data = valid_graph()
    patch(node(data, "gate"))
    error = refused(data, UnknownNodeReference)
    assert f"node 'gate', field '{field}': unknown node 'publish'" in error.message
    assert error.context == {"node": "gate", "field": field}


def test_an_agent_router_choice_to_an_unknown_node_is_refused() -> None:
    data = valid_graph()
    node(data, "gate").update(rules=[], default=None, agent="writer", prompt="",
                              choices={"go": "write", "stop": "nowhere"})
    error = refused(data, UnknownNodeReference)
    assert "node 'gate', field 'choices.stop': unknown node 'nowhere'" in error.message


def test_an_approval_on_reject_to_an_unknown_node_is_refused() -> None:
    data = valid_graph()
    node(data, "ok")["on_reject"] = "redo"
    error = refused(data, UnknownNodeReference)
    assert "node 'ok', field 'on_reject': unknown node 'redo'" in error.message


def test_an_unknown_agent_id_names_the_node_the_field_and_the_known_agents() -> None:
    data = valid_graph()
    node(data, "write")["agent"] = "editor"
    error = refused(data)
    assert error.code == "invalid_graph"
    assert "node 'write', field 'agent': unknown agent 'editor'" in error.message
    assert "known: writer" in error.message


# -- loops -----------------------------------------------------------------------------------


def test_a_cycle_without_max_iterations_is_refused_as_unbounded() -> None:
    data = valid_graph()
    data["edges"].append({"from": "ok", "to": "research"})
    error = refused(data, UnboundedCycleError)
    assert error.code == "unbounded_cycle"
    assert "'g'" in error.message and "max_iterations" in error.message
    assert error.context["field"] == "max_iterations"


def test_a_cycle_closed_by_a_router_rule_also_needs_max_iterations() -> None:
    data = valid_graph()
    node(data, "ok")["on_reject"] = "research"
    assert refused(data, UnboundedCycleError).code == "unbounded_cycle"
    data["max_iterations"] = 3
    assert parse_graph(data).max_iterations == 3


# -- node rules ------------------------------------------------------------------------------


def test_a_prompt_placeholder_not_in_reads_names_the_node_and_the_placeholder() -> None:
    data = valid_graph()
    node(data, "write")["prompt"] = "Write from {notes} for {audience}"
    error = refused(data)
    assert "node 'write', field 'prompt': placeholder {audience} is not in 'reads'" in error.message


def test_a_join_prompt_with_many_placeholders_is_checked_against_its_reads() -> None:
    data = valid_graph()
    write = node(data, "write")
    write["reads"] = [*write["reads"], *(f"k{i}" for i in range(6))]
    write["prompt"] = " ".join(f"{{k{i}}}" for i in range(6)) + " {notes}"
    assert parse_graph(data).node("write").prompt == write["prompt"]
    write["prompt"] += " {missing}"
    error = refused(data)
    assert "node 'write', field 'prompt': placeholder {missing} is not in 'reads'" in error.message


def test_a_single_agent_node_with_two_writes_is_refused() -> None:
    data = valid_graph()
    node(data, "write")["writes"] = ["draft", "summary"]
    error = refused(data)
    assert "node 'write', field 'writes'" in error.message and "found 2" in error.message


def test_an_agent_node_with_both_agent_and_roles_is_refused() -> None:
    data = valid_graph()
    node(data, "write")["roles"] = {"editor": {"agent": "writer"}}
    assert "node 'write'" in refused(data).message


def test_a_role_writing_a_key_outside_the_node_writes_names_the_role_field() -> None:
    data = valid_graph()
    node(data, "write").update(agent=None, writes=["draft"], roles={
        "author": {"agent": "writer", "writes": "draft"},
        "critic": {"agent": "writer", "writes": "critique"},
    })
    error = refused(data)
    assert "node 'write', field 'roles.critic.writes': key 'critique'" in error.message
    assert error.context == {"node": "write", "field": "roles.critic.writes"}


# -- tools at run time -----------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["os.system", "forklab.engine.scenarios.tools.no_such_tool"])
def test_a_tool_that_cannot_be_resolved_fails_its_node_instead_of_raising(tool: str) -> None:
    graph = parse_graph({"id": "t", "start": "run", "nodes": [
        {"id": "run", "kind": "tool", "tool": tool, "params": {"cmd": "ls"}, "writes": ["out"]},
    ]})
    env = Environment(clock=FixedClock(), ids=counter_ids())

    recorded = run_recorded(graph, {}, env=env)

    failed = [e for e in recorded.event_log if e.type == "node.failed"]
    assert recorded.state.status == "failed"
    assert [e.node for e in failed] == ["run"]
    assert failed[0].error["type"] == "unknown_tool"
    assert tool in failed[0].error["message"]
    assert recorded.event_log[-1].type == "run.failed"


# -- files -----------------------------------------------------------------------------------


def test_load_graph_reads_json_and_yaml_files(tmp_path: Path) -> None:
    (tmp_path / "g.json").write_text(json.dumps(valid_graph()))
    (tmp_path / "g.yml").write_text(SCENARIOS["diamond"].path.read_text())
    assert load_graph(tmp_path / "g.json").id == "g"
    assert load_graph(tmp_path / "g.yml").id == "diamond"


def test_load_graph_on_a_missing_file_is_an_invalid_graph_error(tmp_path: Path) -> None:
    with pytest.raises(GraphValidationError) as info:
        load_graph(tmp_path / "absent.yaml")
    assert info.value.code == "invalid_graph"
    assert "cannot read graph file" in info.value.message and "absent.yaml" in info.value.message


def test_load_graph_refuses_a_file_with_the_wrong_extension(tmp_path: Path) -> None:
    path = tmp_path / "graph.txt"
    path.write_text(json.dumps(valid_graph()))
    with pytest.raises(GraphValidationError) as info:
        load_graph(path)
    assert "graph.txt" in info.value.message and ".json, .yaml or .yml" in info.value.message


def test_a_json_file_holding_bad_json_names_the_format(tmp_path: Path) -> None:
    path = tmp_path / "graph.json"
    path.write_text("id: g\nstart: a\n")  # YAML, not JSON
    with pytest.raises(GraphValidationError, match="not valid JSON"):
        load_graph(path)


# -- schema ----------------------------------------------------------------------------------


def test_graph_json_schema_is_a_valid_schema_discriminating_nodes_by_kind() -> None:
    schema = graph_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)

    nodes = schema["properties"]["nodes"]["items"]
    assert nodes["discriminator"]["propertyName"] == "kind"
    assert set(nodes["discriminator"]["mapping"]) == {
        "agent", "tool", "router", "approval", "subgraph", "workflow"}
    assert {"from", "to"} <= set(schema["$defs"]["Edge"]["properties"])


def test_graph_json_schema_accepts_every_scenario_and_rejects_a_bad_kind() -> None:
    validator = jsonschema.Draft202012Validator(graph_json_schema())
    for scenario in SCENARIOS.values():
        assert not list(validator.iter_errors(scenario.graph().to_wire())), scenario.name
    data = valid_graph()
    node(data, "write")["kind"] = "robot"
    assert list(validator.iter_errors(data))


# -- read slices (issue 8 point 3) ------------------------------------------------------------


def test_a_router_rule_over_a_key_the_router_does_not_read_is_invalid_graph() -> None:
    data = valid_graph()
    node(data, "gate")["rules"][0]["when"].append({"key": "draft", "op": "exists"})

    error = refused(data)

    assert error.code == "invalid_graph"
    assert error.context == {"node": "gate", "field": "rules[0].when[1].key", "key": "draft"}
    assert "node 'gate', field 'rules[0].when[1].key'" in error.message
    assert "'draft' is not in 'reads'" in error.message


def test_a_router_rule_may_test_iteration_without_declaring_it() -> None:
    data = valid_graph()
    node(data, "gate")["rules"][0]["when"].append({"key": "$iteration", "op": "lte",
                                                   "value": 2})
    assert parse_graph(data).node("gate").rules[0].when[1].key == "$iteration"


def test_a_subgraph_input_mapping_a_key_the_node_does_not_read_is_invalid_graph() -> None:
    data = valid_graph()
    data["nodes"].append({"id": "sub", "kind": "subgraph", "graph": "child", "reads": ["goal"],
                          "input": {"topic": "goal", "extra": "notes"}})

    error = refused(data)

    assert error.context == {"node": "sub", "field": "input.extra", "key": "notes"}
    assert "'notes' is not in 'reads'" in error.message
