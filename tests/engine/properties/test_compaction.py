"""Compacted runs: every point forks from what is kept (issue 35, classes 6 and 7; SPEC §3.8).

A generated run is snapshotted at a random seq and compacted up to it. Then, for every
execution of the run (addressed by node and occurrence):

- a boundary after the compaction boundary forks from events, with any ``source``;
- a boundary behind it forks with ``source="auto"`` exactly when the snapshot covers it (the
  snapshot was taken at that boundary or inside the node that starts there, and is rewound
  to it) — and the null fork there reproduces the run with no paid call, as one from events
  would; otherwise it is refused ``fork_point_not_found`` naming an earliest forkable point
  that really forks.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forklab.engine import fork, fork_points
from forklab.engine.errors import ForklabError, ForkPointNotFound
from forklab.engine.reducers import fold
from tests.engine.properties.graphs import graph_cases
from tests.engine.properties.profiles import examples
from tests.engine.properties.recording import record_case, same_outcome, show
from tests.engine.properties.world import Harness


def _reproduces(base: Any, at: Any) -> None:
    null = fork(base.run_id, store=base.store, env=base.env, at=at, source="auto",
                policy={"memoize": True}, ignore_budget=True)
    assert null.state is not None
    paid = [c for c in null.calls if c["label"] not in ("reused", "simulated")]
    assert not paid, f"null fork at {at}: paid {paid}"
    assert same_outcome(null.state, base.state), f"null fork at {at}\n" + show(
        base.state, null.state)


@examples(40)
@given(case=graph_cases(), data=st.data())
def test_auto_forks_every_point_events_or_a_covering_snapshot_hold_and_names_one_that_does(
        case: Any, data: st.DataObject) -> None:
    h = Harness()
    base = record_case(case, h)
    executions = list(base.state.executions)
    last = base.state.version
    upto = data.draw(st.integers(1, max(1, last - 1)), label="snapshot and compaction at")
    base.store.save_snapshot(base.run_id, fold(base.store.read(base.run_id, upto=upto)))
    base.store.compact(base.run_id, upto)

    for ex in executions:
        at = {"before_node": ex.node, "occurrence": ex.occurrence}
        boundary = ex.start_seq - 1
        covered = boundary >= upto or (ex.end_seq is not None and upto < ex.end_seq)
        try:
            _reproduces(base, at)
        except ForkPointNotFound as refused:
            assert not covered, f"{at} (boundary {boundary}, snapshot {upto}): {refused}"
            earliest = refused.context.get("earliest_forkable")
            assert earliest is not None, refused.message
            _reproduces(base, {"sequence": earliest})
        else:
            assert covered, f"{at} forked although nothing covers boundary {boundary}"


@examples(30)
@given(case=graph_cases(), data=st.data())
def test_every_listed_point_of_a_compacted_lineage_forks_and_every_refusal_names_one_that_does(
        case: Any, data: st.DataObject) -> None:
    """A fork of a compacted base inherits its compaction: ``fork_points`` (of the base and of
    the fork) lists only boundaries that fork, and an address that resolves behind the
    boundary names an earliest forkable point that does — never one that is gone itself."""
    h = Harness()
    base = record_case(case, h)
    upto = data.draw(st.integers(1, max(1, base.state.version - 1)), label="compacted up to")
    base.store.save_snapshot(base.run_id, fold(base.store.read(base.run_id, upto=upto)))
    base.store.compact(base.run_id, upto)
    later = fork_points(base.store.read(base.run_id), store=base.store)
    if not later:
        return
    point = data.draw(st.sampled_from(later), label="the fork's point")
    child = fork(base.run_id, store=base.store, env=h.env, at=point.address(),
                 policy={"memoize": True}, ignore_budget=True)
    assert child.state is not None and child.run_id is not None
    if not child.state.finished:
        return

    for run_id in (base.run_id, child.run_id):
        for listed in fork_points(base.store.read(run_id), store=base.store):
            fork(run_id, store=base.store, env=h.env, at=listed.address(), dry_run=True,
                 ignore_budget=True)
    for ex in child.state.executions:
        at = {"before_node": ex.node, "occurrence": ex.occurrence}
        try:
            fork(child.run_id, store=base.store, env=h.env, at=at, dry_run=True,
                 ignore_budget=True)
        except ForkPointNotFound as refused:
            earliest = refused.context.get("earliest_forkable")
            assert earliest is not None, refused.message
            address = {"sequence": earliest}
            if refused.context.get("earliest_forkable_run_id"):
                address["run_id"] = refused.context["earliest_forkable_run_id"]
            fork(child.run_id, store=base.store, env=h.env, at=address, dry_run=True,
                 ignore_budget=True)


_SUGGESTED = re.compile(r"(?:fork at|or|earliest forkable point(?: is|,)?|\() ?seq (\d+)")


@examples(30)
@given(case=graph_cases(), data=st.data())
def test_every_seq_of_a_run_forks_or_is_refused_naming_seqs_that_fork(
        case: Any, data: st.DataObject) -> None:
    """Whatever raw seq is asked for, on a whole or a compacted log: the fork is made, or the
    refusal suggests only boundaries that do fork (before or after the node it splits, the
    earliest forkable point) — never one that is itself gone."""
    h = Harness()
    base = record_case(case, h)
    last = base.state.version
    if data.draw(st.booleans(), label="compacted"):
        upto = data.draw(st.integers(1, max(1, last - 1)), label="compacted up to")
        base.store.save_snapshot(base.run_id, fold(base.store.read(base.run_id, upto=upto)))
        base.store.compact(base.run_id, upto)

    for seq in range(0, last + 2):
        try:
            fork(base.run_id, store=base.store, env=h.env, at={"sequence": seq},
                 dry_run=True, ignore_budget=True)
        except ForklabError as refused:
            suggested = {int(n) for n in _SUGGESTED.findall(refused.message)} - {seq}
            for other in sorted(suggested):
                fork(base.run_id, store=base.store, env=h.env, at={"sequence": other},
                     dry_run=True, ignore_budget=True)
