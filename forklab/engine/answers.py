"""What an answer to an approval gate may write (SPEC §2 memory, §3.3 ``human_response``).

An approval gate declares the memory it writes in ``writes``, as every node does: the first
key receives the decision, the keys after it are the ones an answer's ``memory_updates`` may
set (a reviewer's edit of what the gate shows: ``writes: [approval, draft]``). An answer
setting any other key is refused, as an output change naming a key outside its node's
``writes`` or a tool returning one is: ``invalid_overrides`` (limit ``writes``), its
``field`` the user's path of the key (``memory_updates.note``), the message saying which
keys the gate accepts and what to do. The decision key itself is no answer's to set — it
holds the decision the answer gives.

:func:`check_answer` is the one check, for every way an answer arrives: a paused run's
answer (the API and dashboard before it is stored, :meth:`Runner.answer` before anything is
appended), a fork's ``human_response`` change at preflight (against every gate of the
fork's graph: the change answers each gate its tail reaches), and a ``hitl`` callback's
answer (its node fails, as a node whose tool returned an undeclared key does).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forklab.engine.errors import InvalidOverrides
from forklab.engine.graph import ApprovalNode
from forklab.engine.inputs import error_path


def answer_keys(node: ApprovalNode) -> list[str]:
    """The memory keys an answer to ``node`` may set: its ``writes`` after the first (which
    receives the decision); none for a tool call's gate inside an agent node."""
    return list(node.writes[1:]) if isinstance(node, ApprovalNode) else []


def check_answer(node: ApprovalNode, memory_updates: Mapping[str, Any] | None, *,
                 what: str = "an answer to", fix: str = "", **context: Any) -> None:
    """Refuse ``memory_updates`` setting a key ``node`` does not declare for answers
    (``invalid_overrides``, nothing applied). ``what`` names the answer in the message (``an
    answer to`` the gate), ``fix`` adds a way out to the advice, ``context`` goes into the
    error body next to ``field`` (the first undeclared key's path), ``node``, ``expected``
    (the keys the gate accepts) and ``undeclared`` (every key refused)."""
    allowed = answer_keys(node)
    undeclared = sorted(key for key in memory_updates or {} if key not in allowed)
    if not undeclared:
        return

    def path(key: str) -> str:
        return error_path(("memory_updates", key), {"memory_updates": {key: None}})

    decision_key = node.writes[0] if node.writes else None
    accepted = ", ".join(repr(k) for k in allowed) or "none"
    others = [k for k in undeclared if k != decision_key]
    found, advice = [], "leave it out"
    if others:  # every key refused is named, not only the first
        them = "it" if len(others) == 1 else "them"
        found.append(f"{', '.join(path(k) for k in others)} "
                     f"{'is' if len(others) == 1 else 'are'} not declared")
        suggested = [*(node.writes or ["approval"]), *others]
        advice = (f"leave {them} out, or declare {them} in the gate's 'writes' after its "
                  f"decision key (writes: [{', '.join(suggested)}]){fix}")
    if decision_key in undeclared:
        found.append(f"{path(decision_key)} would overwrite {decision_key!r}, which holds the "
                     "decision (the answer's 'decision' sets it)")
        if others:
            advice += f"; leave {decision_key!r} out"
    field = path(undeclared[0])
    raise InvalidOverrides(
        f"{what} approval gate {node.id!r} may set only the memory keys the gate declares "
        f"in its 'writes' after the decision key ({accepted}); {'; '.join(found)}: {advice}",
        limit="writes", field=field, node=node.id, expected=allowed, undeclared=undeclared,
        **context)


__all__ = ["answer_keys", "check_answer"]
