"""Redaction of action records: what counts as secret, numbered placeholders, failing masks,
and that matching (request and args hashes) never sees a placeholder."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forklab.engine import (
    Environment,
    MemoryStore,
    change,
    fork,
    parse_graph,
    replay,
    run_recorded,
)
from forklab.engine.canonical import canonical_json
from forklab.engine.fork.continuing import resume_run
from forklab.engine.providers import ChatRequest
from forklab.engine.redaction import (
    DEFAULT_KEYS,
    MASK_FAILED,
    NO_REDACTION,
    Redactor,
    _contains,
    contains_placeholder,
    key_words,
)

SECRETS = [
    "sk-proj-abcdefghijklmnopqrstuvwx", "AKIAABCDEFGHIJKLMNOP",
    "ghp_" + "a1" * 18, "xoxb-1234567890-abcdef",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
]


def test_secret_key_names_are_matched_word_by_word() -> None:
    redactor = Redactor()
    for name in ("api_key", "X-Api-Key", "apiKey", "Authorization", "password", "db_password",
                 "access_token", "authToken", "client_secret", "SECRET", "Set-Cookie"):
        assert redactor.secret_key(name), name
    for name in ("max_tokens", "input_tokens", "keyboard", "author", "secretary", "notes"):
        assert not redactor.secret_key(name), name
    assert key_words("X-Api-Key") == ("x", "api", "key")


_NAME_PARTS = st.sampled_from(["api", "key", "Api", "KEY", "token", "Token", "s", "id",
                               "session", "set", "cookie", "x", "pass", "word", "9", "é"])


@given(st.lists(st.tuples(_NAME_PARTS, st.sampled_from(["", "_", "-", " ", ".", "__"])),
                max_size=6),
       st.lists(st.lists(_NAME_PARTS, min_size=1, max_size=3), max_size=3))
@settings(max_examples=300, deadline=None)
def test_secret_key_substring_test_agrees_with_the_word_scan(
        parts: list[tuple[str, str]], extra: list[list[str]]) -> None:
    """secret_key's delimited-substring test answers as a scan of word slices would."""
    name = "".join(word + sep for word, sep in parts)
    redactor = Redactor().with_keys("_".join(words) for words in extra)
    words = key_words(name)
    expected = any(_contains(words, key_words(k)) for k in redactor.keys if key_words(k))
    assert redactor.secret_key(name) is expected, name


def test_values_under_secret_keys_become_numbered_placeholders() -> None:
    record = {"headers": {"Authorization": "Basic dXNlcjpwYXNz", "X-Request": "r-1"},
              "password": "hunter2", "again": {"password": "hunter2"},
              "token": {"value": "abc", "scope": "read"}, "max_tokens": 256}
    redacted = Redactor().redact(record)
    assert redacted == {"headers": {"Authorization": "[REDACTED]#1", "X-Request": "r-1"},
                        "password": "[REDACTED]#2", "again": {"password": "[REDACTED]#2"},
                        "token": "[REDACTED]#3", "max_tokens": 256}
    assert record["password"] == "hunter2"  # the input is never changed


def test_secret_shapes_are_masked_inside_any_string() -> None:
    text = ("call with Authorization: Bearer abcdefghijklmnop and key "
            f"{SECRETS[0]} then {SECRETS[0]} again, aws {SECRETS[1]}")
    redacted = Redactor().redact({"note": text})["note"]
    assert redacted == ("call with Authorization: Bearer [REDACTED]#1 and key [REDACTED]#2 "
                        "then [REDACTED]#2 again, aws [REDACTED]#3")
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----"
    assert Redactor().redact([pem]) == ["[REDACTED]#1"]


def test_a_mask_that_raises_fails_closed() -> None:
    def broken(text: str) -> str:
        if "customer" in text:
            raise ValueError("mask bug")
        return text.replace("ACME", "[customer]")

    redactor = Redactor(masks=(broken,))
    assert redactor.redact({"a": "ACME Corp", "b": "the customer id 42", "n": 3}) == {
        "a": "[customer] Corp", "b": MASK_FAILED, "n": 3}


def test_settings_can_add_key_names() -> None:
    redactor = Redactor().with_keys(["customer_ssn", " "])
    assert redactor.redact({"customer_ssn": "123-45-6789"}) == {"customer_ssn": "[REDACTED]#1"}
    assert set(DEFAULT_KEYS) <= set(redactor.keys)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text() | st.sampled_from(SECRETS) | st.sampled_from([f"Bearer {s}" for s in SECRETS]),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["api_key", "password", "token", "note", "text", "id",
                                       "max_tokens", "Authorization", "data"]), children,
                      max_size=4),
    max_leaves=20)


def _leaks(original: Any, redacted: Any) -> list[str]:
    text = canonical_json(redacted)
    return [s for s in SECRETS if s in canonical_json(original) and s in text]


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return None


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_redaction_leaks_no_known_secret_and_is_pure_and_idempotent(value: Any) -> None:
    redactor = Redactor()
    before = json.dumps(value, sort_keys=True)
    once = redactor.redact(value)
    assert json.dumps(value, sort_keys=True) == before  # input untouched
    assert _leaks(value, once) == []
    assert redactor.redact(value) == once  # deterministic
    assert redactor.redact(once) == once  # idempotent
    assert NO_REDACTION.redact(value) == value


def _one_pattern_at_a_time(redactor: Redactor) -> Redactor:
    """The same redactor without its precheck: every pattern substituted in turn."""
    object.__setattr__(redactor, "_hints", None)
    return redactor


SHAPED_TEXTS = [
    *SECRETS, *(f"Bearer {s}" for s in SECRETS), "Bearer abcdefghijkl", "BEARER abcdefghijkl",
    "bEaReR abcdefghijkl", "basic dXNlcjpwYXNzd29yZA==", "Basic dXNlcjpwYXNzd29yZA==",
    "ba\u017fic dXNlcjpwYXNzd29yZA==", "beareR\tabcdefghijkl", "plain text", "", "é",
    "x-42 then -----BEGIN RSA PRIVATE KEY-----\nkey\n-----END RSA PRIVATE KEY-----",
    "[REDACTED]#1 after sk-abcdefghijklmnopqrst", "no sk- key here sk-short",
    "ghs_" + "b2" * 16, "xoxp-" + "9" * 12, "AKIA" + "Z" * 16, "eyJ" + "a" * 8,
]


def test_the_default_patterns_precheck_redacts_exactly_like_each_pattern_in_turn() -> None:
    checked, each = Redactor(), _one_pattern_at_a_time(Redactor())
    assert checked._hints is not None
    for text in SHAPED_TEXTS:
        value = {"text": text, "list": [text, "x " + text + " y"]}
        assert checked.redact(value) == each.redact(value), text
    assert checked.redact("ba\u017fic dXNlcjpwYXNzd29yZA==") != "ba\u017fic dXNlcjpwYXNzd29yZA=="
    assert Redactor(values=(re.compile("secret-[a-z]{4}"),))._hints is None  # custom: no test


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_the_default_patterns_precheck_agrees_on_any_value(value: Any) -> None:
    assert Redactor().redact(value) == _one_pattern_at_a_time(Redactor()).redact(value)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_placeholders_are_numbered_from_one_without_gaps(value: Any) -> None:
    import re

    numbers = {int(n) for n in re.findall(r"\[REDACTED\]#(\d+)", canonical_json(
        Redactor().redact(value)))}
    assert numbers == set(range(1, len(numbers) + 1))


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_redaction_keeps_the_shape_of_containers_under_plain_keys(value: Any) -> None:
    plain = Redactor(keys=())
    assert _shape(plain.redact(value)) == _shape(value)


GRAPH = parse_graph({
    "id": "redact-demo", "start": "ask",
    "agents": {"helper": {"model": "scripted-small",
                          "system_prompt": f"Use the key {SECRETS[0]} when calling out.",
                          "params": {"api_key": "k-123456"}}},
    "nodes": [
        {"id": "ask", "kind": "agent", "agent": "helper", "reads": ["question"],
         "writes": ["answer"], "prompt": "Question: {question}"},
        {"id": "lookup", "kind": "tool", "tool": "forklab.engine.scenarios.tools.fetch_page",
         "effect": "read", "reads": ["url", "password"], "writes": ["page"]},
    ],
    "edges": [{"from": "ask", "to": "lookup"}],
})
INPUT = {"question": "Bearer abcdefghijklmnopqrst works?", "url": "https://example.org/vaccines",
         "password": "hunter2"}


def test_recorded_requests_and_tool_calls_are_redacted_and_hashes_are_not() -> None:
    recorded = run_recorded(GRAPH, INPUT, store=MemoryStore())
    events = {e.type: e for e in recorded.store.read(recorded.run_id)}
    requested = events["agent.requested"]
    assert requested.system_prompt == "Use the key [REDACTED]#1 when calling out."
    assert requested.messages == [{"role": "user",
                                   "content": "Question: Bearer [REDACTED]#2 works?"}]
    assert requested.params == {"api_key": "[REDACTED]#3"}
    unredacted = ChatRequest(provider="scripted", model="scripted-small",
                             system_prompt=GRAPH.resolve_agent("helper").system_prompt,
                             temperature=requested.temperature,
                             messages=({"role": "user", "content":
                                        f"Question: {INPUT['question']}"},),
                             max_tokens=GRAPH.resolve_agent("helper").max_tokens,
                             params={"api_key": "k-123456"})
    assert requested.request_hash == unredacted.request_hash
    assert events["tool.called"].args["password"] == "[REDACTED]#1"
    assert recorded.state.memory["password"] == "hunter2"  # memory is not an action record
    assert not contains_placeholder(recorded.state.memory)


def test_a_null_fork_of_a_redacted_run_reuses_every_call() -> None:
    store = MemoryStore()
    recorded = run_recorded(GRAPH, INPUT, store=store)
    result = fork(recorded, at="start", store=store, policy={"memoize": True})
    assert result.state is not None
    assert result.state.memory == recorded.state.memory
    assert {c["label"] for c in result.calls} == {"reused"}


def test_an_environment_without_redaction_records_requests_as_sent() -> None:
    env = Environment(redactor=NO_REDACTION)
    recorded = run_recorded(GRAPH, INPUT, store=MemoryStore(), env=env)
    requested = next(e for e in recorded.store.read(recorded.run_id)
                     if e.type == "agent.requested")
    assert SECRETS[0] in requested.system_prompt


@pytest.mark.parametrize("placeholder", ["[REDACTED]", "[REDACTED]#7", "[redacted: mask failed]"])
def test_contains_placeholder_finds_every_form(placeholder: str) -> None:
    assert contains_placeholder({"a": [f"x {placeholder} y"]})
    assert not contains_placeholder({"a": ["[redacted]"]})


def _issue_token(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
    return {"session": {"token": f"t-{args['user']}-secret", "user": args["user"]}}


SECRET_TOOL = parse_graph({
    "id": "login", "start": "login",
    "nodes": [
        {"id": "login", "kind": "tool", "tool": "tests.engine.login.issue", "effect": "write",
         "reads": ["user"], "writes": ["session"]},
        {"id": "greet", "kind": "agent", "agent": {"model": "scripted-small"},
         "reads": ["session"], "writes": ["greeting"], "prompt": "Greet {session}"},
    ],
    "edges": [{"from": "login", "to": "greet"}],
})


def _login_env() -> Environment:
    env = Environment()
    env.tools.register("tests.engine.login.issue", _issue_token)
    return env


def test_a_redacted_tool_result_served_from_the_recording_writes_the_real_value() -> None:
    store = MemoryStore()
    recorded = run_recorded(SECRET_TOOL, {"user": "ada"}, store=store, env=_login_env())
    returned = next(e for e in store.read(recorded.run_id) if e.type == "tool.returned")
    assert returned.result == {"session": {"token": "[REDACTED]#1", "user": "ada"}}

    guarded = fork(recorded, at="start", store=store, env=_login_env())  # write served, not run
    memoized = fork(recorded, at="start", store=store, env=_login_env(),
                    policy={"memoize": True, "side_effects": {"allow": ["login"]}},
                    change=change.prompt("greet", "Be brief."))

    for result in (guarded, memoized):
        assert result.state is not None
        assert result.state.memory["session"] == recorded.state.memory["session"]
        assert not contains_placeholder(result.state.memory)


def test_strict_replay_of_a_run_with_a_redacted_tool_result_does_not_diverge() -> None:
    store = MemoryStore()
    recorded = run_recorded(SECRET_TOOL, {"user": "ada"}, store=store, env=_login_env())

    state = replay(recorded.run_id, store=store, strict=True, env=_login_env())

    assert state.memory == recorded.state.memory


def _interrupted_copy(recorded: Any, upto_type: str) -> MemoryStore:
    """A store holding the recording up to (and including) its first ``upto_type`` event, as a
    process killed right after appending it would leave it."""
    events = recorded.store.read(recorded.run_id)
    cut = next(e.seq for e in events if e.type == upto_type)
    store = MemoryStore()
    store.save_graph(SECRET_TOOL)
    store.append(recorded.run_id, events[:cut], expected_seq=0)
    return store


def test_resuming_inside_a_write_tool_serves_its_redacted_result_with_the_real_writes() -> None:
    counted: list[str] = []
    env = _login_env()
    env.tools.register("tests.engine.login.issue",
                       lambda args, ctx: counted.append("login") or _issue_token(args, ctx))
    recorded = run_recorded(SECRET_TOOL, {"user": "ada"}, store=MemoryStore(), env=_login_env())
    store = _interrupted_copy(recorded, "memory.written")

    resumed = resume_run(recorded.run_id, store=store, env=env)

    assert counted == []  # the write tool is not executed twice
    assert resumed.state.memory == recorded.state.memory


def test_resuming_a_write_tool_whose_writes_were_lost_fails_it_instead_of_running_it_twice() -> None:
    counted: list[str] = []
    env = _login_env()
    env.tools.register("tests.engine.login.issue",
                       lambda args, ctx: counted.append("login") or _issue_token(args, ctx))
    recorded = run_recorded(SECRET_TOOL, {"user": "ada"}, store=MemoryStore(), env=_login_env())
    store = _interrupted_copy(recorded, "tool.returned")

    resumed = resume_run(recorded.run_id, store=store, env=env)

    assert counted == []
    assert resumed.state.status == "failed"
    assert resumed.state.error is not None
    assert resumed.state.error["type"] == "recording_incomplete"
    assert not contains_placeholder(resumed.state.memory)
