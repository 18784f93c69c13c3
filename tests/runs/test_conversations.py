"""An agent execution's events read as a conversation thread (pure: events in, data out)."""

from __future__ import annotations

from forklab.engine.fork import fork
from forklab.engine.reused_form import expand_all
from forklab.runs.conversations import build_thread, split_history
from tests.engine.fork.helpers import record
from tests.engine.golden_tool import load_golden


def test_each_turn_holds_its_tool_calls_under_their_keys_in_call_order() -> None:
    events = load_golden("support-agent")["events"]
    thread = build_thread(events, run_id="r", node="assist", occurrence=1)
    assert thread is not None and thread.looped and not thread.served
    assert [(t.key, [u.tool for u in t.tools]) for t in thread.turns] == [
        ("assist#1/turn:1", ["lookup_order", "search_policy"]),
        ("assist#1/turn:2", ["issue_refund"]), ("assist#1/turn:3", [])]
    refund = thread.turns[1].tools[0]
    assert (refund.effect, refund.label, refund.done) == ("write", "live", True)
    assert refund.call_id == thread.turns[1].tool_calls[0]["id"]
    assert thread.turns[2].finish_reason == "stop"


def test_a_node_that_asked_no_model_has_no_thread() -> None:
    events = load_golden("order-fulfilment")["events"]
    assert build_thread(events, run_id="r", node="lookup_price", occurrence=1) is None


def test_history_folds_up_to_the_last_assistant_message() -> None:
    user = {"role": "user", "content": "hi"}
    reply = {"role": "assistant", "content": "", "tool_calls": [{"id": "1"}]}
    result = {"role": "tool", "content": "{}", "tool_call_id": "1"}
    assert split_history([user]) == ([], [user])
    assert split_history([user, reply, result]) == ([user, reply], [result])
    assert split_history([user, reply, result, reply, user]) == (
        [user, reply, result, reply], [user])


def test_a_served_execution_reads_as_its_recorded_turns_without_requests() -> None:
    base = record("support-agent")
    served = fork(base, at="start", policy={"memoize": True})
    assert served.run_id is not None
    events = expand_all([e.to_wire() for e in base.store.read(served.run_id)])
    thread = build_thread(events, run_id=served.run_id, node="assist", occurrence=1)
    assert thread is not None and thread.served
    assert [t.key for t in thread.turns] == ["assist#1/turn:1", "assist#1/turn:2",
                                             "assist#1/turn:3"]
    assert {t.label for t in thread.turns} == {"reused"}
    assert all(u.done and u.label == "reused" for t in thread.turns for u in t.tools)
    assert all(not t.new and not t.earlier for t in thread.turns)


def test_a_model_asked_from_inside_a_tool_shows_under_that_tool_call() -> None:
    from tests.engine.agents.test_tool_asks import record as record_asks

    base, _ = record_asks()
    events = [e.to_wire() for e in base.event_log]
    thread = build_thread(events, run_id="r", node="assist", occurrence=1)
    assert thread is not None
    assert [t.key for t in thread.turns] == ["assist#1/turn:1", "assist#1/turn:2"]
    (tool,) = thread.turns[0].tools
    assert [a.key for a in tool.asks] == ["assist#1/turn:1/tool:1/ask:1",
                                          "assist#1/turn:1/tool:1/ask:2"]
    assert all(a.answered and a.text and a.cost_usd for a in tool.asks)


def test_a_gated_tool_call_carries_its_approval() -> None:
    from forklab.engine.oracle import HumanAnswer
    from forklab.engine.recording import run_recorded
    from tests.engine.agents.helpers import TICKET, FollowingModel, env_with
    from tests.engine.agents.test_tool_gates import gated_graph

    base = run_recorded(gated_graph(), dict(TICKET), env=env_with(FollowingModel()),
                        hitl=lambda request: HumanAnswer(decision="approved",
                                                         answered_by="ada"))
    events = [e.to_wire() for e in base.event_log]
    thread = build_thread(events, run_id="r", node="assist", occurrence=1)
    assert thread is not None
    refund = next(u for t in thread.turns for u in t.tools if u.tool == "issue_refund")
    assert refund.approval is not None
    assert (refund.approval["decision"], refund.approval["answered_by"]) == ("approved", "ada")
    assert refund.done and refund.arguments == {"order_id": "A-1001", "amount": 39.98}


def _event(seq: int, kind: str, **payload: object) -> dict[str, object]:
    return {"seq": seq, "type": kind, "node": "support", "occurrence": 1, "payload": payload}


def _workflow_events(*, refund_args: dict[str, object]) -> list[dict[str, object]]:
    """A workflow's log: openai:1 asks lookup_order and issue_refund; the code calls them
    (the refund with ``refund_args``), then a tool nobody asked for, then openai:2."""
    asked = [{"id": "call_1", "name": "lookup_order", "arguments": {"order_id": "A-1"}},
             {"id": "call_2", "name": "issue_refund",
              "arguments": {"order_id": "A-1", "amount": 5}}]
    user = {"role": "user", "content": "refund A-1"}
    return [
        _event(1, "agent.requested", call="openai:1", model="m", messages=[user]),
        _event(2, "agent.responded", call="openai:1", model="m", text="", tool_calls=asked),
        _event(3, "tool.called", call="tool:lookup_order#1", tool="lookup_order",
               effect="read", args={"order_id": "A-1"}, call_id="tool:lookup_order#1"),
        _event(4, "tool.returned", call="tool:lookup_order#1", result={"total": 5},
               label="live"),
        _event(5, "tool.called", call="audit/tool:note#1", tool="note", effect="write",
               args={"text": "x"}),
        _event(6, "tool.returned", call="audit/tool:note#1", result="ok", label="live"),
        _event(7, "tool.called", call="tool:issue_refund#1", tool="issue_refund",
               effect="write", args=refund_args),
        _event(8, "tool.returned", call="tool:issue_refund#1", result={"status": "issued"},
               label="live"),
        _event(9, "agent.requested", call="openai:2", model="m", messages=[
            user, {"role": "assistant", "content": "", "tool_calls": asked},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"total": 5}'},
            {"role": "tool", "tool_call_id": "call_2", "content": '{"status": "issued"}'}]),
        _event(10, "agent.responded", call="openai:2", model="m", text="Refunded."),
    ]


def _layout(events: list[dict[str, object]]) -> list[tuple[str, list[str]]]:
    thread = build_thread(events, run_id="r", node="support", occurrence=1)
    assert thread is not None
    return [(t.key, [u.key for u in t.tools]) for t in thread.turns]


def test_a_workflows_tool_call_sits_under_the_turn_whose_reply_asked_for_it() -> None:
    assert _layout(_workflow_events(refund_args={"order_id": "A-1", "amount": 5})) == [
        ("support#1/openai:1", ["support#1/tool:lookup_order#1",
                                "support#1/tool:issue_refund#1"]),
        ("support#1/audit/tool:note#1", ["support#1/audit/tool:note#1"]),  # nobody asked
        ("support#1/openai:2", [])]


def test_a_tool_called_with_other_arguments_is_placed_by_the_result_answering_the_call() -> None:
    # the code rounded the amount: the arguments differ, the next request answers call_2
    # with this call's result
    assert _layout(_workflow_events(refund_args={"order_id": "A-1", "amount": 5.0001}))[0] == (
        "support#1/openai:1", ["support#1/tool:lookup_order#1", "support#1/tool:issue_refund#1"])


def test_each_asked_tool_call_takes_one_code_call_the_second_stays_its_own() -> None:
    events = _workflow_events(refund_args={"order_id": "A-1", "amount": 5})
    events[8:8] = [  # the code looks the order up again, after the refund
        _event(8, "tool.called", call="tool:lookup_order#2", tool="lookup_order",
               effect="read", args={"order_id": "A-1"}),
        _event(8, "tool.returned", call="tool:lookup_order#2", result={"total": 5},
               label="live")]
    layout = _layout(events)
    assert layout[0][1] == ["support#1/tool:lookup_order#1", "support#1/tool:issue_refund#1"]
    assert layout[2] == ("support#1/tool:lookup_order#2", ["support#1/tool:lookup_order#2"])
