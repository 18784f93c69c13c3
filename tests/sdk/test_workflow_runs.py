"""What a workflow run records beyond one loop: steps, failures, divergence, fork-check."""

from __future__ import annotations

from typing import Any

import pytest

from forklab.engine import fork, fork_check
from forklab.engine.environment import Environment, FixedClock, counter_ids
from forklab.engine.errors import WorkflowResolutionError
from forklab.engine.recording import RecordedRun, run_recorded
from forklab.engine.workflows import WorkflowRegistry, workflow_graph
from tests.sdk import agents
from tests.vendor_stub import VendorStub


@pytest.fixture
def env() -> Environment:
    return Environment(clock=FixedClock(), ids=counter_ids(),
                       workflows=WorkflowRegistry(("forklab.demo_agents.", "tests.sdk.")))


def record(env: Environment, name: str, **inputs: Any) -> RecordedRun:
    return run_recorded(workflow_graph(env.workflows, f"tests.sdk.agents:{name}"), inputs,
                        env=env)


def keys(run: RecordedRun) -> list[str | None]:
    return [getattr(e, "call", None) for e in run.event_log if e.TYPE == "agent.requested"]


def test_the_graph_of_a_workflow_is_one_node_named_by_its_id_reading_its_parameters(
        env: Environment) -> None:
    graph = workflow_graph(env.workflows, "tests.sdk.agents:two_step")
    assert (graph.id, graph.start) == ("two_step", "two_step")
    [node] = graph.nodes
    assert (node.kind, node.reads, node.writes) == ("workflow", ["question"], ["output"])


def test_a_module_outside_the_allowed_ones_is_refused_saying_what_to_do() -> None:
    with pytest.raises(WorkflowResolutionError) as info:
        workflow_graph(WorkflowRegistry(), "os:system")
    assert info.value.code == "unknown_workflow"
    assert "FORKLAB_WORKFLOW_MODULES" in info.value.message


def test_a_function_that_is_not_decorated_is_refused(env: Environment) -> None:
    with pytest.raises(WorkflowResolutionError, match=r"@forklab\.workflow"):
        workflow_graph(env.workflows, "tests.sdk.agents:undecorated")


def test_steps_group_calls_and_number_them_each(clients: VendorStub, env: Environment) -> None:
    run = record(env, "two_step", question="Is A-1001 late?")
    assert run.state.status == "completed", run.state.error
    assert keys(run) == ["draft/openai:1", "review/openai:1"]
    assert run.memory["output"]["review"].startswith("You said: Check: ")


def test_code_that_raises_fails_its_node_with_the_traceback(clients: VendorStub,
                                                            env: Environment) -> None:
    run = record(env, "broken", question="hi")
    assert run.state.status == "failed"
    error = run.state.error or {}
    assert error["type"] == "workflow_error"
    assert "KeyError" in error["message"] and "the code's own bug" in error["message"]
    assert "tests/sdk/agents.py" in error["message"]  # the user's frames
    assert keys(run) == ["openai:1"]  # the call it made is recorded


def test_a_prefix_call_whose_request_changed_is_prefix_diverged_naming_it(
        clients: VendorStub, env: Environment, monkeypatch: pytest.MonkeyPatch) -> None:
    base = record(env, "two_step", question="Is A-1001 late?")
    monkeypatch.setitem(agents.EDITION, "prompt", "Be thorough.")  # the code changed since
    result = fork(base, at={"before_call": "two_step#1/review/openai:1"},
                  policy={"memoize": True})
    assert result.state is not None and result.state.status == "failed"
    error = result.state.error or {}
    assert error["type"] == "prefix_diverged"
    assert error["call"] == "two_step#1/draft/openai:1"
    assert "draft/openai:1" in error["message"]
    assert "system prompt differs: recorded 'Be brief.' now 'Be thorough.'" in error["message"]
    assert error["differences"] == [{
        "part": "system_prompt", "summary": "system prompt differs: recorded 'Be brief.' now "
        "'Be thorough.'", "recorded": "Be brief.", "now": "Be thorough."}]


def test_a_prefix_tool_call_with_other_arguments_names_them(
        clients: VendorStub, env: Environment, monkeypatch: pytest.MonkeyPatch) -> None:
    base = record(env, "echo_then_ask", question="Where is")
    assert base.state.status == "completed", base.state.error
    monkeypatch.setitem(agents.EDITION, "order", "A-1002")
    result = fork(base, at={"before_call": "echo_then_ask#1/openai:1"})
    assert result.state is not None
    error = result.state.error or {}
    assert error["type"] == "prefix_diverged", error
    assert error["call"] == "echo_then_ask#1/tool:echo#1"
    assert ('arguments differ: {"value":{"order":"A-1001"}} vs {"value":{"order":"A-1002"}}'
            in error["message"])
    assert [d["part"] for d in error["differences"]] == ["arguments"]


def test_forkcheck_reports_code_that_does_not_reproduce(clients: VendorStub,
                                                        env: Environment) -> None:
    base = record(env, "dice", question="Pick one")
    result, _end = fork_check(base.run_id, store=base.store, env=env)
    assert not result.ok
    assert "dice:agent:changed [dice#1/openai:1]" in result.detail


def test_forkcheck_says_what_differs_in_a_prefix_call_that_does_not_reproduce(
        clients: VendorStub, env: Environment) -> None:
    base = record(env, "dice_twice", question="Pick one")
    results = fork_check(base.run_id, store=base.store, env=env)
    [at_second] = [r for r in results if r.point.call == "dice_twice#1/openai:2"]
    assert not at_second.ok
    assert "error     prefix_diverged: call dice_twice#1/openai:1" in at_second.detail
    assert "message 1 (role user) content differs: recorded 'Pick one (roll 0." in (
        at_second.detail)


def test_forkcheck_passes_a_deterministic_workflow(clients: VendorStub,
                                                   env: Environment) -> None:
    base = record(env, "two_step", question="Is A-1001 late?")
    results = fork_check(base.run_id, store=base.store, env=env)
    assert [r.point.call for r in results] == [None, "two_step#1/review/openai:1", None]
    assert all(r.ok and r.calls == 0 for r in results)


def test_a_tool_called_with_arguments_that_are_not_json_ends_the_node_even_if_caught(
        env: Environment) -> None:
    run = record(env, "odd_tool", question="x")
    assert run.state.status == "failed"
    assert (run.state.error or {})["type"] == "non_json_result"
    assert "the arguments of tool 'echo'" in (run.state.error or {})["message"]


def test_a_tool_called_outside_any_workflow_just_runs() -> None:
    assert agents.echo({"a": 1}) == {"a": 1}


def test_the_guard_ends_the_node_even_when_the_code_catches_every_exception(
        env: Environment) -> None:
    base = record(env, "careful_refund", order_id="A-1003", amount=18.0)
    assert base.memory["output"] == "issued"
    result = fork(base, at="start", change={"kind": "input_patch", "patch": {"amount": 99.0}})
    assert result.state is not None and result.state.status == "blocked"
    assert [e["inputs"]["args"] for e in result.suppressed_effects] == [
        {"order_id": "A-1003", "amount": 99.0}]
