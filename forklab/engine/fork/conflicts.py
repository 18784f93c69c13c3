"""Conflicting changes (SPEC §3.3): two changes of one request that write the same thing.

Each change is described by the *paths* it writes (its kind's ``written_paths()``), and two changes conflict when a path of
one is a prefix of (or equal to) a path of the other — ``*`` matching any one step. Paths:

- an agent change: the attribute of the agent it sets, where the node config holds it —
  ``node/n/agent/model`` for a node's agent, ``node/n/roles/r/agent/model`` plus
  ``node/n/roles/r/instances/*/model`` for a whole role, ``node/n/roles/r/instances/i/model``
  for one instance (so a role-wide and an instance change of one attribute conflict);
- ``config``: every leaf of its merge patch under ``node/n`` (patching ``agent`` or a role
  conflicts with an agent change of that node or role);
- ``output`` and ``tool``: the whole node ``node/n`` (they substitute what it produces, so
  they conflict with each other and with any agent or config change of the node);
- ``route``: ``route/n``; ``human_response``: ``human``;
- ``memory`` and ``input_patch``: ``memory/<key>`` (an input patch down to its leaves, so two
  patches of different keys combine while a memory change and a patch of one key conflict).

Never resolved by order: the request is refused naming both changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from forklab.engine.errors import ConflictingChanges
from forklab.engine.fork.changes import Change, MemoryChange, Path


def written_paths(item: Change) -> list[Path]:
    """The paths a change writes (each kind says: ``written_paths()`` on its type)."""
    return item.written_paths()


def _overlap(a: Path, b: Path) -> bool:
    """One path is a prefix of the other (``*`` matches any single step)."""
    return all(x == y or "*" in (x, y) for x, y in zip(a, b, strict=False))


def check_conflicts(changes: Sequence[Change]) -> None:
    """Raise ConflictingChanges for the first two changes of one request that overlap."""
    written = [(item, written_paths(item)) for item in changes]
    for i, (first, first_paths) in enumerate(written):
        _self_conflict(first, first_paths)
        for second, second_paths in written[i + 1:]:
            shared = next(((a, b) for a in first_paths for b in second_paths if _overlap(a, b)),
                          None)
            if shared is not None:
                _refuse(first, second, shared[0] if len(shared[0]) >= len(shared[1])
                        else shared[1])


def _self_conflict(item: Change, paths: list[Path]) -> None:
    """A memory change that both sets and deletes a key writes it twice."""
    if isinstance(item, MemoryChange):
        both = sorted(set(item.set) & set(item.delete))
        if both:
            _refuse(item, item, ("memory", both[0]))


def _refuse(first: Change, second: Change, path: Path) -> None:
    what = "/".join(path)
    raise ConflictingChanges(
        f"two changes write the same thing ({what}): {first.describe()!r} and "
        f"{second.describe()!r}; keep one, or run them as separate variants of a sweep",
        key=list(path), changes=[first.wire(), second.wire()],
    )
