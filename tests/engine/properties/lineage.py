"""Which changes are independent, and which refine one another (semantics "Forks of forks",
"Conflicts")."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from forklab.engine.fork.changes import (
    HumanResponseChange,
    InputPatchChange,
    MemoryChange,
)
from forklab.engine.graph import GraphSpec
from forklab.engine.state import Execution, RunState
from tests.engine.properties.changes import changes, first_affected, node_of


def _keys(item: Any) -> set[str]:
    if isinstance(item, MemoryChange):
        return set(item.set) | set(item.delete)
    if isinstance(item, InputPatchChange):
        return set(item.patch)
    return set()


def independent(a: Any, b: Any) -> bool:
    """True when two changes touch nothing in common: no node, no key, no gate."""
    if node_of(a) is not None and node_of(a) == node_of(b):
        return False
    if _keys(a) & _keys(b):
        return False
    both = {type(a), type(b)}
    return not ({HumanResponseChange} == both or {InputPatchChange} == both)


@st.composite
def independent_change(draw: Any, graph: GraphSpec, state: RunState, of: Any,
                       kinds: tuple[str, ...]) -> Any:
    """A change of ``kinds`` independent of ``of`` (filtered: most draws are)."""
    return draw(changes(graph, state, kinds).filter(lambda c: independent(of, c)))


def index_of_first_affected(items: list[Any], graph: GraphSpec, state: RunState) -> int | None:
    """Index in ``state.executions`` of the first execution any of ``items`` affects."""
    found = [state.executions.index(ex) for item in items
             if (ex := first_affected(item, graph, state)) is not None]
    return min(found) if found else None


def named(ex: Execution) -> dict[str, Any]:
    """The named address of the boundary before an execution (resolves in any logical run)."""
    return {"before_node": ex.node, "occurrence": ex.occurrence}
