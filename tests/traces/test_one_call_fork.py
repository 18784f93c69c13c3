"""One-call forks of runs imported from traces (SPEC §8 (a)), engine level: a replayable
model call re-asked through forklab's providers with its recorded request and the change;
everything else refused with a code saying what is possible."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from forklab.engine.errors import ForklabError
from forklab.engine.events import AgentRequested, AgentResponded, RunForked
from forklab.engine.fork import fork
from forklab.engine.fork.base import fork_points, load_base
from forklab.engine.fork.onecall import re_ask
from forklab.engine.fork.sweep import fork_each
from forklab.engine.fork.variant import fork_runner
from forklab.engine.providers import (
    AnthropicProvider,
    ChatRequest,
    OpenAICompatibleProvider,
    ProviderRegistry,
)
from forklab.engine.providers.anthropic import UNSENT_MAX_TOKENS
from forklab.engine.reducers import fold
from forklab.engine.status import RunStatus
from forklab.engine.store import Store
from forklab.engine.traces import decode_protobuf, read_otlp_json
from forklab.runs.calldiff import call_diff
from tests.traces.forking import imported, offline_env
from tests.traces.spans import GENAI_CONTENT, traced
from tests.traces.test_mapping import chat, span, text, workflow
from tests.vendor_stub import VendorStub

TURN2 = "researcher#1/turn:2"


def _asked(store: Store, run_id: str, call: str | None) -> AgentRequested:
    return next(e for e in store.read(run_id) if isinstance(e, AgentRequested)
                and e.call == call)


def _code(error: pytest.ExceptionInfo[ForklabError]) -> str:
    return error.value.code


def test_a_model_change_re_asks_the_call_with_its_recorded_request() -> None:
    store = imported(workflow())
    result = fork("imported", at={"before_call": TURN2}, store=store, env=offline_env(),
                  change={"kind": "model", "call": TURN2, "model": "gpt-4.1"})
    base, asked = _asked(store, "imported", "turn:2"), _asked(store, result.run_id, "turn:2")
    assert asked.model == "gpt-4.1" and base.model == "gpt-4o"
    assert (asked.messages, asked.tools, asked.system_prompt) == (
        base.messages, base.tools, base.system_prompt)  # the recorded request, changed
    state = fold(store.read(result.run_id))
    assert state.status == RunStatus.COMPLETED
    assert state.fork is not None and state.fork.one_call == TURN2
    assert [(c.call, c.label) for c in state.calls] == [
        ("researcher#1/turn:1", "reused"), ("researcher#1/turn:1/tool:1", "reused"),
        (TURN2, "changed")]  # the calls before it as recorded; the writer not re-executed
    assert state.memory == {}  # no answer re-derived from one call
    path = result.diff.path
    assert path["one_call"] == TURN2 and path["not_reexecuted"] == ["writer"]
    assert path["skipped"] == []  # not gone: not re-executed


def test_the_call_diff_shows_the_old_and_new_reply_and_the_later_calls_not_re_executed(
) -> None:
    store = imported(workflow())
    result = fork("imported", store=store, env=offline_env(),
                  change={"kind": "messages", "call": "writer#1/turn:1",
                          "messages": [{"role": "user", "content": "write it in French"}]})
    assert result.point.call == "writer#1/turn:1"  # no at: before the change's call
    found = call_diff(fold(store.read("imported")), fold(store.read(result.run_id)))
    assert found is not None
    rows = {r.key: r for r in found.rows}
    row = rows["writer#1/turn:1"]
    assert row.op == "changed" and "reply" in row.why
    assert row.base is not None and row.base.text == "done"
    assert row.variant is not None and row.variant.text not in ("", "done")
    assert rows["researcher#1/turn:2"].op == "same"  # the prefix, served


def test_a_fork_at_an_earlier_call_marks_every_later_call_not_re_executed() -> None:
    store = imported(workflow())
    result = fork("imported", store=store, env=offline_env(),
                  change={"kind": "temperature", "call": "researcher#1/turn:1",
                          "temperature": 0.0})
    found = call_diff(fold(store.read("imported")), fold(store.read(result.run_id)))
    assert found is not None
    assert [(r.key, r.op) for r in found.rows][1:] == [
        ("researcher#1/turn:1/tool:1", "not_reexecuted"),
        ("researcher#1/turn:2", "not_reexecuted"), ("writer#1/turn:1", "not_reexecuted")]
    assert found.summary[-1].startswith("3 later call(s) of the base were not re-executed")


def test_a_null_one_call_fork_asks_again_and_memoize_serves_the_recording() -> None:
    store, env = imported(workflow()), offline_env()
    again = fork("imported", at={"before_call": TURN2}, store=store, env=env)
    served = fork("imported", at={"before_call": TURN2}, store=store, env=env,
                  policy={"memoize": True})
    assert fold(store.read(again.run_id)).calls[-1].label == "live"
    assert again.estimate.live_calls == 1
    last = fold(store.read(served.run_id)).calls[-1]
    assert (last.call, last.label) == (TURN2, "reused") and served.estimate.live_calls == 0


def test_what_the_trace_did_not_say_is_left_to_the_vendor_default() -> None:
    store, env = imported(workflow()), offline_env()
    result = fork("imported", at={"before_call": TURN2}, store=store, env=env)
    assert _asked(store, result.run_id, "turn:2").unsent == ["max_tokens", "temperature"]
    changed = fork("imported", at={"before_call": TURN2}, store=store, env=env,
                   change={"kind": "temperature", "call": TURN2, "temperature": 0.3})
    assert _asked(store, changed.run_id, "turn:2").unsent == ["max_tokens"]  # now sent


def test_captured_params_are_sent_and_uncaptured_ones_are_not() -> None:
    spans = [span(1, "app"), chat(2, 1, [text("user", "hi")],
                                  [{"role": "assistant", "parts": [
                                      {"type": "text", "content": "hello"}]}],
                                  gen_ai__request__temperature=0.2,
                                  gen_ai__request__max_tokens=64)]
    store = imported(spans)
    result = fork("imported", at={"before_call": "app#1/turn:1"}, store=store,
                  env=offline_env())
    asked = _asked(store, result.run_id, None)
    assert asked.unsent is None and asked.params == {"max_tokens": 64}
    base = load_base("imported", store=store, env=offline_env())
    _, sent = re_ask(base, {"before_call": "app#1/turn:1"}, [])
    body = OpenAICompatibleProvider().body(sent)
    assert (body["temperature"], body["max_tokens"]) == (0.2, 64)
    _, bare = re_ask(load_base("imported", store=imported(workflow()), env=offline_env()),
                     {"before_call": TURN2}, [])
    assert "temperature" not in OpenAICompatibleProvider().body(bare)
    assert "max_tokens" not in OpenAICompatibleProvider().body(bare)


def test_prompt_and_tools_changes_rewrite_the_request() -> None:
    store, env = imported(workflow()), offline_env()
    result = fork("imported", at={"before_call": TURN2}, store=store, env=env,
                  change=[{"kind": "prompt", "call": TURN2, "system_prompt": "Be terse."},
                          {"kind": "tools", "call": TURN2, "remove": ["lookup"]}])
    asked = _asked(store, result.run_id, "turn:2")
    assert asked.system_prompt == "Be terse." and asked.tools is None
    with pytest.raises(ForklabError) as refused:
        fork("imported", at={"before_call": TURN2}, store=store, env=env,
             change={"kind": "tools", "call": TURN2, "add": ["send_email"]})
    assert _code(refused) == "invalid_change" and "lookup" in refused.value.message
    added = fork("imported", at={"before_call": "writer#1/turn:1"}, store=store,
                 env=env,
                 change={"kind": "tools", "call": "writer#1/turn:1", "add": ["lookup"]})
    assert [t["name"] for t in _asked(store, added.run_id, None).tools or ()] == ["lookup"]


def test_an_inspect_only_call_is_refused_naming_what_is_missing_and_the_setting() -> None:
    spans = [span(1, "app"), chat(2, 1, None, None)]
    store = imported(spans)
    with pytest.raises(ForklabError) as refused:
        fork("imported", at={"before_call": "app#1/turn:1"}, store=store, env=offline_env(),
             change={"kind": "model", "call": "app#1/turn:1", "model": "gpt-4.1"})
    assert _code(refused) == "call_not_replayable"
    assert refused.value.context["missing"] == ["request messages", "reply"]
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in refused.value.message


@pytest.mark.parametrize(("at", "change"), [
    ({"before_node": "researcher"}, None),
    ("start", None),
    ({"before_call": "researcher#1/turn:1/tool:1"}, None),
    (None, None),
    ({"before_call": TURN2}, {"kind": "memory", "set": {"x": 1}}),
    ({"before_call": TURN2}, {"kind": "model", "target": "researcher", "model": "m"}),
    ({"before_call": TURN2}, {"kind": "model", "call": "writer#1/turn:1", "model": "m"}),
    ({"before_call": TURN2}, {"kind": "reply", "call": TURN2, "text": "x"}),
])
def test_what_an_imported_run_cannot_take_is_refused_saying_what_is_possible(
        at: Any, change: Any) -> None:
    store = imported(workflow())
    with pytest.raises(ForklabError) as refused:
        fork("imported", at=at, change=change, store=store, env=offline_env())
    assert _code(refused) == "one_call_only"
    assert "before_call" in refused.value.message or "call it re-asks" in refused.value.message


def test_a_provider_forklab_lacks_is_refused_unless_a_model_change_names_one() -> None:
    spans = [span(1, "app"), chat(2, 1, [text("user", "hi")], [
        {"role": "assistant", "parts": [{"type": "text", "content": "hello"}]}],
        gen_ai__provider__name="aws.bedrock")]
    store, env = imported(spans), offline_env()
    with pytest.raises(ForklabError) as refused:
        fork("imported", at={"before_call": "app#1/turn:1"}, store=store, env=env)
    assert _code(refused) == "unknown_provider" and '"provider": "openai"' in str(
        refused.value.message)
    result = fork("imported", store=store, env=env, change={
        "kind": "model", "call": "app#1/turn:1", "model": "scripted-small",
        "provider": "scripted"})
    assert _asked(store, result.run_id, None).provider == "scripted"


def test_a_one_call_fork_cannot_be_forked_again() -> None:
    store, env = imported(workflow()), offline_env()
    first = fork("imported", at={"before_call": TURN2}, store=store, env=env)
    with pytest.raises(ForklabError) as refused:
        fork(first.run_id, at={"before_call": TURN2}, store=store, env=env)
    assert _code(refused) == "one_call_only" and "'imported'" in refused.value.message


def test_a_sweep_asks_one_imported_call_of_several_models() -> None:
    store = imported(workflow())
    swept = fork_each("imported", at={"before_call": "writer#1/turn:1"}, store=store,
                      env=offline_env(), variants={
                          name: {"kind": "model", "call": "writer#1/turn:1", "model": name}
                          for name in ("gpt-4.1", "gpt-4o-mini")})
    assert not swept.errors
    models = {name: _asked(store, r.run_id, None).model for name, r in swept.results.items()}
    assert models == {"gpt-4.1": "gpt-4.1", "gpt-4o-mini": "gpt-4o-mini"}


def test_the_fork_keeps_its_own_copy_of_what_it_forked() -> None:
    store = imported(workflow())
    result = fork("imported", at={"before_call": TURN2}, store=store, env=offline_env())
    forked = next(e for e in store.read(result.run_id) if isinstance(e, RunForked))
    assert forked.one_call == TURN2 and forked.prefix_ref == {}  # not by reference
    asked = [e for e in store.read(result.run_id) if isinstance(e, AgentRequested)]
    assert [a.call for a in asked] == [None, "turn:2"]  # the node's calls in its own log


def _stub_trace(stub: VendorStub) -> list[Any]:
    request, _ = traced(stub, "genai", GENAI_CONTENT, tools=False)
    spans, rejected = read_otlp_json(decode_protobuf(request.SerializeToString()))
    assert not rejected
    return spans


def test_a_messages_change_re_asks_the_vendor_in_its_own_format(stub: VendorStub) -> None:
    store = imported(_stub_trace(stub))
    env = offline_env()
    env.providers = ProviderRegistry({"openai": OpenAICompatibleProvider(
        base_url=stub.openai_base_url, max_retries=0)})
    key = "weather_agent#1/turn:1"
    result = fork("imported", store=store, env=env, change={
        "kind": "messages", "call": key,
        "messages": [{"role": "user", "content": "Weather in Lyon?"}]})
    sent = stub.bodies("openai")[-1]
    assert sent["messages"] == [{"role": "system", "content": "You are a weather assistant."},
                                {"role": "user", "content": "Weather in Lyon?"}]
    assert sent["temperature"] == 0.2 and "max_tokens" not in sent  # as captured, no more
    replies = [e.text for e in store.read("imported") if isinstance(e, AgentResponded)]
    new = [e.text for e in store.read(result.run_id) if isinstance(e, AgentResponded)]
    assert replies == ["You said: Weather in Paris?"] and new == ["You said: Weather in Lyon?"]
    assert json.dumps(result.diff.path["one_call"]) == json.dumps(key)


def test_rerun_asks_the_call_again_live_even_with_memoize() -> None:
    store = imported(workflow())
    result = fork("imported", store=store, env=offline_env(), policy={"memoize": True},
                  change={"kind": "rerun", "call": TURN2})
    last = fold(store.read(result.run_id)).calls[-1]
    assert (last.call, last.label) == (TURN2, "live") and result.estimate.live_calls == 1


def test_a_one_call_fork_cut_short_inside_its_node_resumes_to_the_same_end() -> None:
    store, env = imported(workflow()), offline_env()
    done = fork("imported", at={"before_call": TURN2}, store=store, env=env,
                change={"kind": "prompt", "call": TURN2, "system_prompt": "Be terse."})
    events = store.read(done.run_id)
    asked = next(e for e in events if isinstance(e, AgentRequested) and e.call == "turn:2")
    again = imported(workflow())  # a fresh store holding the base: the process died there
    again.append("cut", [dataclasses.replace(e, run_id="cut") for e in events
                         if e.seq <= asked.seq], expected_seq=0)
    state = fork_runner("cut", store=again, env=offline_env()).resume()
    assert state.status == RunStatus.COMPLETED
    assert state.fork is not None and state.fork.one_call == TURN2
    assert [(c.call, c.label) for c in state.calls][-1] == (TURN2, "changed")
    assert [e.type for e in again.read("cut")][-3:] == [
        "agent.responded", "node.completed", "run.completed"]
    resent = [e for e in again.read("cut") if isinstance(e, AgentRequested)
              and e.call == "turn:2"][-1]
    assert resent.system_prompt == "Be terse."


def test_the_cost_delta_compares_the_re_asked_call_with_the_base_call_alone() -> None:
    store = imported(workflow())
    result = fork("imported", store=store, env=offline_env(),
                  change={"kind": "temperature", "call": "researcher#1/turn:1",
                          "temperature": 0.0})
    base, variant = fold(store.read("imported")), fold(store.read(result.run_id))
    old, new = base.calls[0], variant.calls[-1]
    assert (old.call, new.call) == ("researcher#1/turn:1", "researcher#1/turn:1")
    assert result.diff.cost["tokens_delta"] == (
        new.input_tokens + new.output_tokens - old.input_tokens - old.output_tokens)


def test_providers_leave_unsent_fields_to_the_vendor() -> None:
    request = ChatRequest(provider="anthropic", model="claude", system_prompt="",
                          temperature=1.0, messages=({"role": "user", "content": "hi"},),
                          unsent=frozenset({"temperature", "max_tokens"}))
    body = AnthropicProvider(api_key="x").body(request)
    assert "temperature" not in body and body["max_tokens"] == UNSENT_MAX_TOKENS
    captured = dataclasses.replace(request, unsent=frozenset(),
                                   params={"max_completion_tokens": 50})
    sent = OpenAICompatibleProvider().body(captured)
    assert sent["temperature"] == 1.0 and "max_tokens" not in sent  # not beside the other
    assert sent["max_completion_tokens"] == 50
    assert dataclasses.replace(request, unsent=frozenset()).request_hash == request.request_hash


def test_an_imported_run_lists_a_point_before_each_model_call_and_each_forks() -> None:
    store, env = imported(workflow()), offline_env()
    points = fork_points(store.read("imported"), store=store)
    assert [p.call for p in points] == [
        "researcher#1/turn:1", "researcher#1/turn:2", "writer#1/turn:1"]
    for point in points:  # every point listed resolves and forks
        assert fork("imported", at=point.address(), store=store, env=env).state is not None
