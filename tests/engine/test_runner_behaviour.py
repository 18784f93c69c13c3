"""What the live runner does: taint, joins, loops, routing, approvals, cancel, subgraphs, failures."""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine import recording
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.errors import RunStateError
from forklab.engine.fork.continuing import answer_run
from forklab.engine.graph import GraphSpec, RouterNode, parse_graph
from forklab.engine.oracle import HumanAnswer
from forklab.engine.planner import route_by_rules
from forklab.engine.recording import RecordedRun, run, run_recorded
from forklab.engine.runner import CancelToken
from forklab.engine.scenarios import SCENARIOS
from forklab.engine.store import MemoryStore

AGENT = {"model": "scripted-small", "system_prompt": "Be brief."}


def make_env() -> Environment:
    env = Environment(clock=FixedClock(), ids=counter_ids("run"))
    env.tools.register("t.const", lambda args, ctx: args.get("value", "v"))
    env.tools.register("t.echo", lambda args, ctx: dict(args))
    return env


def tool(node_id: str, writes: list[str], reads: list[str] | None = None, *,
         tool: str = "t.const", value: Any = "v", **extra: Any) -> dict:
    return {"id": node_id, "kind": "tool", "tool": tool, "reads": reads or [],
            "writes": writes, "params": {"value": value}, **extra}


def graph(nodes: list[dict], edges: list[tuple[str, str]] = (), **extra: Any) -> GraphSpec:
    return parse_graph({"id": extra.pop("id", "g"), "start": nodes[0]["id"], "nodes": nodes,
                        "edges": [{"from": a, "to": b} for a, b in edges], **extra})


def record(spec: GraphSpec, input: dict | None = None, **options: Any) -> RecordedRun:
    options.setdefault("env", make_env())
    return run_recorded(spec, input or {}, **options)


def record_scenario(name: str, **options: Any) -> RecordedRun:
    scenario = SCENARIOS[name]
    return record(scenario.graph(), dict(scenario.input), **options)


def path(recorded: RecordedRun) -> list[tuple[str, int, int]]:
    return [(e["node"], e["occurrence"], e["iteration"]) for e in recorded.state.path()]


def events_of(recorded: RecordedRun, type_: str) -> list[Any]:
    return [e for e in recorded.event_log if e.type == type_]


# -- taint -----------------------------------------------------------------------------------


def test_everything_derived_from_an_untrusted_page_is_tainted_and_trusted_inputs_are_not() -> None:
    recorded = record_scenario("research-web")

    assert recorded.state.status == "completed"
    assert {"page", "facts", "answer", "remembered"} <= recorded.state.taint
    assert not {"url", "question"} & recorded.state.taint
    writes = {e.key: e.tainted for e in events_of(recorded, "memory.written")}
    assert writes == {"page": True, "facts": True, "answer": True, "remembered": True}


def test_a_trusted_overwrite_clears_taint_and_unrelated_reads_stay_clean() -> None:
    spec = graph([tool("fetch", ["x"], trusted=False), tool("clean", ["x"]),
                  tool("other", ["y"], reads=["z"])], [("fetch", "clean"), ("clean", "other")])

    recorded = record(spec, {"z": 1})

    assert recorded.state.taint == set()
    assert [e.tainted for e in events_of(recorded, "memory.written")] == [True, False, False]


# -- joins -----------------------------------------------------------------------------------


def test_a_join_all_node_runs_once_after_both_branches_complete() -> None:
    recorded = record_scenario("diamond")

    assert path(recorded) == [("plan", 1, 1), ("left", 1, 1), ("right", 1, 1), ("join", 1, 1)]
    completed = {e.node: e for e in events_of(recorded, "node.completed")}
    join_started = next(e for e in events_of(recorded, "node.started") if e.node == "join")
    assert completed["left"].waiting == ["join"] and completed["left"].next == []
    assert completed["right"].next == ["join"]
    assert join_started.seq > max(completed["left"].seq, completed["right"].seq)
    assert set(join_started.reads) == {"left", "right"}


@pytest.mark.parametrize(("join", "join_runs"), [("all", 1), ("any", 2)])
def test_join_all_waits_for_the_longer_branch_where_join_any_runs_on_each_arrival(
    join: str, join_runs: int
) -> None:
    spec = graph(
        [tool("plan", ["p"]), tool("l1", ["a"]), tool("l2", ["b"]), tool("l3", ["c"]),
         tool("r1", ["d"]), tool("join", ["out"], reads=["c", "d"], join=join)],
        [("plan", "l1"), ("l1", "l2"), ("l2", "l3"), ("l3", "join"), ("plan", "r1"),
         ("r1", "join")],
    )

    recorded = record(spec)

    joins = [e for e in recorded.state.path() if e["node"] == "join"]
    assert len(joins) == join_runs
    assert recorded.state.path()[-1]["node"] == "join"


# -- loops -----------------------------------------------------------------------------------


def test_the_review_loop_counts_occurrences_and_iterations_per_node() -> None:
    recorded = record_scenario("review-loop")

    assert recorded.state.status == "completed"
    assert recorded.state.occurrences == {"draft": 1, "review": 3, "gate": 3, "revise": 2}
    assert path(recorded) == [
        ("draft", 1, 1), ("review", 1, 1), ("gate", 1, 1), ("revise", 1, 1),
        ("review", 2, 2), ("gate", 2, 2), ("revise", 2, 2), ("review", 3, 3), ("gate", 3, 3),
    ]
    decided = events_of(recorded, "route.decided")
    assert [(e.reason, e.to) for e in decided[:2]] == [("default", "revise")] * 2
    expected_rule = "rule 0" if recorded.memory["verdict"] == "approved" else "rule 1"
    assert (decided[2].reason, decided[2].to) == (expected_rule, "end")
    assert recorded.state.iteration == 3


def test_a_loop_past_max_iterations_fails_the_run_with_loop_limit() -> None:
    spec = graph([tool("work", ["n"]), {"id": "again", "kind": "router", "default": "work"}],
                 [("work", "again")], max_iterations=2)

    recorded = record(spec)

    assert recorded.state.status == "failed"
    assert recorded.state.error["code"] == "loop_limit"
    assert recorded.state.error["node"] == "work"
    assert "max_iterations=2" in recorded.state.error["message"]
    assert path(recorded) == [("work", 1, 1), ("again", 1, 1), ("work", 2, 2), ("again", 2, 2)]


# -- routers ---------------------------------------------------------------------------------


CONDITIONS = [
    ("eq", "urgent", "urgent", True), ("eq", "urgent", "bug", False),
    ("ne", "urgent", "bug", True), ("ne", "urgent", "urgent", False),
    ("in", ["a", "b"], "a", True), ("in", ["a", "b"], "c", False),
    ("not_in", ["a", "b"], "c", True), ("not_in", ["a", "b"], "a", False),
    ("gt", 2, 3, True), ("gt", 2, 2, False), ("gte", 2, 2, True), ("gte", 2, 1, False),
    ("lt", 2, 1, True), ("lt", 2, 2, False), ("lte", 2, 2, True), ("lte", 2, 3, False),
    ("exists", None, 0, True), ("truthy", None, "yes", True), ("truthy", None, "", False),
    ("falsy", None, 0, True), ("falsy", None, [1], False),
    ("contains", "fire", "the server is on fire", True), ("contains", "x", ["y"], False),
    ("contains", "x", 5, False), ("gt", 2, "three", False),
]


@pytest.mark.parametrize(("op", "value", "actual", "holds"), CONDITIONS)
def test_each_condition_op_routes_to_the_rule_only_when_it_holds(op, value, actual, holds) -> None:
    router = RouterNode(id="r", rules=[{"when": [{"key": "k", "op": op, "value": value}],
                                        "to": "yes"}], default="no")

    target, reason = route_by_rules(router, {"k": actual}, iteration=1)

    assert (target, reason) == (("yes", "rule 0") if holds else ("no", "default"))


def test_exists_does_not_hold_for_an_absent_key() -> None:
    router = RouterNode(id="r", rules=[{"when": [{"key": "k", "op": "exists"}], "to": "yes"}])
    assert route_by_rules(router, {}, iteration=1) == ("end", "default")


@pytest.mark.parametrize(("iteration", "target"), [(1, "again"), (2, "again"), (3, "stop")])
def test_an_iteration_condition_reads_the_loop_counter(iteration: int, target: str) -> None:
    router = RouterNode(id="r", rules=[
        {"when": [{"key": "$iteration", "op": "gte", "value": 3}], "to": "stop"}],
        default="again")
    assert route_by_rules(router, {"$iteration": 99}, iteration=iteration)[0] == target


def test_a_rule_needs_all_its_conditions_and_the_first_matching_rule_wins() -> None:
    router = RouterNode(id="r", default="d", rules=[
        {"when": [{"key": "a", "value": 1}, {"key": "b", "value": 2}], "to": "both"},
        {"when": [{"key": "a", "value": 1}], "to": "a_only"},
        {"when": [{"key": "a", "op": "exists"}], "to": "later"},
    ])
    assert route_by_rules(router, {"a": 1, "b": 2}, 1) == ("both", "rule 0")
    assert route_by_rules(router, {"a": 1, "b": 3}, 1) == ("a_only", "rule 1")


def test_a_router_records_its_decision_and_writes_the_target() -> None:
    recorded = record_scenario("triage-router")
    category = recorded.memory["category"]
    expected = "escalate" if category == "urgent" else "reply"

    decided = events_of(recorded, "route.decided")

    assert [e.to for e in decided] == [expected]
    assert path(recorded)[-1][0] == expected
    spec = graph([tool("a", ["x"]), {"id": "r", "kind": "router", "writes": ["choice"],
                  "reads": ["x"], "rules": [{"when": [{"key": "x", "value": "v"}], "to": "b"}]},
                  tool("b", ["y"])], [("a", "r")])
    assert record(spec).memory == {"x": "v", "choice": "b", "y": "v"}


# -- approvals -------------------------------------------------------------------------------


def approval_graph(answer_writes: tuple[str, ...] = ()) -> GraphSpec:
    """draft -> approve -> publish (fix on reject); ``answer_writes``: the keys after the
    decision key the gate declares, which an answer's memory updates may set."""
    return graph([
        tool("draft", ["draft"], value="first draft"),
        {"id": "approve", "kind": "approval", "reads": ["draft"],
         "writes": ["approval", *answer_writes], "on_reject": "fix"},
        tool("publish", ["published"], reads=["draft"], tool="t.echo"),
        tool("fix", ["fixed"], value="fixed"),
    ], [("draft", "approve"), ("approve", "publish")])


def test_an_approval_gate_pauses_and_an_approved_answer_completes_the_run() -> None:
    store = MemoryStore()
    paused = record(approval_graph(), store=store)
    assert paused.state.status == "paused"
    assert paused.state.pending_human["node"] == "approve"
    assert paused.event_log[-1].type == "human.requested"

    done = answer_run(paused.run_id, HumanAnswer(decision="approved"), store=store, env=make_env())

    assert done.state.status == "completed"
    assert [p[0] for p in path(done)] == ["draft", "approve", "publish"]
    assert done.memory["approval"] == "approved"
    assert done.memory["published"]["draft"] == "first draft"


def test_a_rejected_answer_routes_to_on_reject() -> None:
    store = MemoryStore()
    paused = record(approval_graph(), store=store)

    done = answer_run(paused.run_id, HumanAnswer(decision="rejected"), store=store)

    assert [p[0] for p in path(done)] == ["draft", "approve", "fix"]
    assert done.memory["approval"] == "rejected" and "published" not in done.memory


def test_an_edited_answer_applies_its_memory_updates_before_the_run_goes_on() -> None:
    answer = HumanAnswer(decision="edited", memory_updates={"draft": "better draft"})

    recorded = record(approval_graph(answer_writes=("draft",)), hitl=lambda request: answer)

    assert recorded.state.status == "completed"
    assert recorded.memory["approval"] == "edited"
    assert recorded.memory["published"]["draft"] == "better draft"
    answered = events_of(recorded, "human.answered")[0]
    assert answered.memory_updates == {"draft": "better draft"}


def test_answering_a_run_that_is_not_paused_raises_run_state_error() -> None:
    store = MemoryStore()
    recorded = record(approval_graph(), store=store, hitl=lambda r: HumanAnswer("approved"))

    with pytest.raises(RunStateError) as info:
        answer_run(recorded.run_id, HumanAnswer(decision="approved"), store=store)

    assert info.value.code == "invalid_run_state"
    assert "completed" in info.value.message and "not paused" in info.value.message
    assert len(store.read(recorded.run_id)) == len(recorded.event_log)


# -- cancel ----------------------------------------------------------------------------------


def test_a_cancel_token_set_before_start_cancels_before_any_node() -> None:
    token = CancelToken()
    token.cancel()

    recorded = record_scenario("research-write", cancel=token)

    assert recorded.state.status == "cancelled"
    assert [e.type for e in recorded.event_log] == ["run.started", "run.cancelled"]
    assert recorded.state.error["code"] == "cancelled"


def test_a_cancel_token_set_inside_a_tool_stops_the_run_at_the_next_boundary() -> None:
    token = CancelToken()
    env = make_env()
    env.tools.register("t.cancel", lambda args, ctx: token.cancel() or "done")
    spec = graph([tool("stop", ["s"], tool="t.cancel"), tool("after", ["a"])], [("stop", "after")])

    recorded = record(spec, env=env, cancel=token)

    assert recorded.state.status == "cancelled"
    assert [p[0] for p in path(recorded)] == ["stop"]
    assert recorded.event_log[-1].type == "run.cancelled"
    assert "a" not in recorded.memory


# -- subgraphs -------------------------------------------------------------------------------


def test_a_subgraph_node_runs_a_child_run_and_maps_its_outputs_back() -> None:
    child = graph([{"id": "summarize", "kind": "agent", "agent": AGENT, "reads": ["topic"],
                    "writes": ["summary"], "prompt": "Summarize {topic}"}], id="child")
    parent = graph([
        tool("prep", ["subject"], value="tides"),
        {"id": "sub", "kind": "subgraph", "graph": "child", "reads": ["subject"],
         "writes": ["result"], "input": {"topic": "subject"}, "output": {"result": "summary"}},
    ], [("prep", "sub")], id="parent")
    store = MemoryStore()
    store.save_graph(child)

    recorded = record(parent, store=store)

    child_id = events_of(recorded, "subgraph.started")[0].child_run_id
    child_state = recording.load_run(child_id, store=store).state
    assert recorded.state.status == "completed" and child_state.status == "completed"
    assert child_state.run_kind == "subgraph"
    assert child_state.parent_run_id == recorded.run_id
    assert child_state.input == {"topic": "tides"}
    assert recorded.memory["result"] == child_state.memory["summary"]
    assert recorded.state.output_tokens == child_state.output_tokens > 0


def test_a_subgraph_naming_an_unstored_graph_fails_its_node() -> None:
    spec = graph([{"id": "sub", "kind": "subgraph", "graph": "nowhere"}])

    recorded = record(spec)

    assert recorded.state.status == "failed"
    assert events_of(recorded, "node.failed")[0].error["type"] == "not_found"
    assert "nowhere" in recorded.state.error["message"]


# -- roles -----------------------------------------------------------------------------------


def test_panel_vote_asks_three_indexed_voters_then_the_judge() -> None:
    recorded = record_scenario("panel-vote")

    asked = [(e.role, e.index) for e in events_of(recorded, "agent.requested") if e.node == "vote"]

    assert asked == [("voters", 0), ("voters", 1), ("voters", 2), ("judge", None)]
    assert len(recorded.memory["votes"]) == 3 and set(recorded.memory["votes"]) <= {"yes", "no"}
    assert recorded.memory["decision"] in {"ship", "hold"}
    judge = events_of(recorded, "agent.requested")[3]
    assert "voters[2]: " in judge.messages[-1]["content"]
    assert [c.to_wire()["role"] for c in recorded.state.calls[:4]] == [
        "voters[0]", "voters[1]", "voters[2]", "judge"]


# -- failures and outputs --------------------------------------------------------------------


def test_a_tool_that_raises_fails_its_node_and_the_run_with_its_message() -> None:
    env = make_env()
    env.tools.register("t.boom", lambda args, ctx: (_ for _ in ()).throw(ValueError("no disk")))
    spec = graph([tool("ok", ["a"]), tool("bad", ["b"], tool="t.boom"), tool("never", ["c"])],
                 [("ok", "bad"), ("bad", "never")])

    recorded = record(spec, env=env)

    assert [e.type for e in recorded.event_log[-2:]] == ["node.failed", "run.failed"]
    failed = recorded.event_log[-2]
    assert failed.node == "bad"
    assert failed.error == {"type": "ValueError", "message": "no disk"}
    assert recorded.event_log[-1].error["code"] == "node_failed"
    assert recorded.state.status == "failed" and recorded.state.error["message"] == "no disk"
    assert [p[0] for p in path(recorded)] == ["ok", "bad"] and "b" not in recorded.memory


def test_run_returns_final_memory_and_keeps_no_log(monkeypatch: pytest.MonkeyPatch) -> None:
    runners: list[Any] = []

    class Spy(recording.Runner):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            runners.append(self)

    recorded = record_scenario("research-write")
    monkeypatch.setattr(recording, "Runner", Spy)
    scenario = SCENARIOS["research-write"]

    memory = run(scenario.graph(), dict(scenario.input), env=make_env())

    assert memory == recorded.memory
    (runner,) = runners
    assert runner.store.read(runner.run_id) == []
    assert runner.store.last_seq(runner.run_id) == len(recorded.event_log)


def json_agent(choices: list[str]) -> dict:
    return {"id": "extract", "kind": "agent", "agent": AGENT, "writes": ["data"],
            "output": "json", "choices": choices}


def test_a_json_agent_whose_answer_is_not_json_fails_with_invalid_json() -> None:
    recorded = record(graph([json_agent(["certainly not json"])]))

    assert recorded.state.status == "failed"
    error = events_of(recorded, "node.failed")[0].error
    assert error["type"] == "invalid_json" and "'extract'" in error["message"]
    assert "data" not in recorded.memory


def test_a_json_agent_writes_its_parsed_answer() -> None:
    recorded = record(graph([json_agent(['{"items": [1, 2]}'])]))

    assert recorded.memory["data"] == {"items": [1, 2]}


# -- read slices (issue 8 point 3) ------------------------------------------------------------


def _unvalidated(nodes: list[Any], edges: list[tuple[str, str]]) -> GraphSpec:
    """A graph whose nodes skipped cross-node validation: what the runtime does on its own."""
    valid = [n.model_copy(update={"reads": ["secret"]}) for n in nodes]
    spec = graph([n.model_dump(mode="json") for n in valid], edges)
    object.__setattr__(spec, "nodes", nodes)
    for cached in ("index", "content_hash"):  # derived from the fields just swapped
        spec.__dict__.pop(cached, None)
    return spec


def _run_unsaved(spec: GraphSpec, store: MemoryStore) -> Any:
    """Run a graph the store would refuse to save (the runtime on its own)."""
    from forklab.engine.runner import Runner

    return Runner(spec, store=store, run_id="r1", env=make_env(), graph_version=1).start({})


def test_a_router_sees_only_its_read_slice_at_runtime() -> None:
    from forklab.engine.graph import ToolNode

    spec = _unvalidated([
        ToolNode(id="a", tool="t.const", writes=["secret"], params={"value": "yes"}),
        RouterNode(id="r", reads=[], default="end",
                   rules=[{"when": [{"key": "secret", "op": "exists"}], "to": "b"}]),
        ToolNode(id="b", tool="t.const", writes=["reached"]),
    ], [("a", "r")])

    state = _run_unsaved(spec, MemoryStore())

    assert [e.node for e in state.executions] == ["a", "r"]
    assert state.executions[1].route == "end"


def test_a_subgraph_input_mapping_sees_only_the_read_slice_at_runtime() -> None:
    from forklab.engine.graph import SubgraphNode, ToolNode

    store = MemoryStore()
    store.save_graph(graph([tool("echo", ["got"], ["topic"], tool="t.echo")], id="child"))
    spec = _unvalidated([
        ToolNode(id="a", tool="t.const", writes=["secret"], params={"value": "hidden"}),
        SubgraphNode(id="sub", graph="child", reads=[], input={"topic": "secret"},
                     output={"got": "got"}),
    ], [("a", "sub")])

    state = _run_unsaved(spec, store)

    assert state.memory["got"] == {"value": "v", "topic": None}


def test_a_subgraph_that_runs_its_own_graph_fails_its_node_instead_of_nesting_forever() -> None:
    store = MemoryStore()
    spec = graph([{"id": "again", "kind": "subgraph", "graph": "g"}])
    store.save_graph(spec)

    recorded = record(spec, store=store)

    assert recorded.state.status == "failed"
    assert recorded.state.error["type"] == "subgraph_cycle"
    assert "would run graph 'g' inside itself" in recorded.state.error["message"]
