"""The side-effect guard matches on the memo fingerprint (issue 8 point 3).

Policy ``replay`` serves a write (or a child run) only when the base has a finished
execution with the same fingerprint — the same read slice, loop context and config — never
merely the same arguments: a second send the base never made is blocked, not reported done.
"""

from __future__ import annotations

from typing import Any

from forklab.engine import change, fork
from forklab.engine.canonical import canonical_equals
from forklab.engine.graph import parse_graph
from forklab.engine.recording import run_recorded
from tests.engine.fork.helpers import make_env

SENT: list[int] = []


def _env() -> Any:
    env = make_env()

    def send(args: dict[str, Any], ctx: Any) -> dict[str, Any]:
        SENT.append(ctx.occurrence)
        return {"sent": ctx.occurrence}

    env.tools.register("t.send", send)
    return env


LOOP = {
    "id": "mailer", "start": "send", "max_iterations": 4,
    "nodes": [
        {"id": "send", "kind": "tool", "tool": "t.send", "effect": "write", "writes": ["sent"],
         "params": {"to": "ada@example.com"}},
        {"id": "again", "kind": "router", "reads": ["more", "sent"], "default": "end",
         "rules": [{"when": [{"key": "more", "op": "truthy"}, {"key": "sent", "value": 1}],
                    "to": "send"}]},
    ],
    "edges": [{"from": "send", "to": "again"}],
}


def test_a_write_with_the_same_args_at_another_occurrence_is_blocked_not_replayed() -> None:
    base = run_recorded(parse_graph(LOOP), {}, env=_env())
    sent = len(SENT)

    result = fork(base, at={"before_node": "again"}, change=change.memory(set={"more": True}))

    assert len(SENT) == sent
    assert result.state.status == "blocked"
    (effect,) = result.suppressed_effects
    assert effect["node"] == "send"
    assert [c["label"] for c in result.calls] == []


def test_the_guard_and_memoization_agree_on_what_same_inputs_means() -> None:
    base = run_recorded(parse_graph(LOOP), {}, env=_env())

    on = fork(base, at={"before_node": "again"}, change=change.memory(set={"more": True}),
              policy={"memoize": True})
    off = fork(base, at={"before_node": "again"}, change=change.memory(set={"more": True}))

    assert canonical_equals(on.state.outcome(), off.state.outcome())


def test_a_null_fork_without_memoize_serves_every_recorded_write() -> None:
    base = run_recorded(parse_graph(LOOP), {"more": True}, env=_env())
    assert [e.node for e in base.state.executions] == ["send", "again", "send", "again"]
    sent = len(SENT)

    result = fork(base, at="start")

    assert len(SENT) == sent
    assert [c["label"] for c in result.calls] == ["reused", "reused"]
    assert canonical_equals(result.state.outcome(), base.state.outcome())
