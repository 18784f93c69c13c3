"""Diff two run states (SPEC §3.5, RunDiff shape of §4.6).

Paths are aligned by longest common subsequence over node ids. The common prefix and suffix
are matched directly; the middle gets an exact LCS from a bit-parallel row DP (Python ints as
bit vectors: O(n·m/64) word operations, ~50 ms for 10,000 x 10,000 steps whatever the number
of edits), keeping every row for the traceback. Past ``BITS_MAX_CELLS`` (memory) Myers'
O(ND) algorithm takes over, and past ``MYERS_MAX_D`` edits difflib's matcher. A node the
variant re-executed at the same place is one ``changed`` step (``write → write@fork``), not a
deletion plus an insertion. Base steps a variant that stopped early never reached are flagged
``not_reached`` and kept out of the deltas — and so are those after a one-call fork's call
(``path.one_call``: the trace's later calls were not re-executed; memory is not compared).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.canonical import canonical_json, json_size
from forklab.engine.state import Call, Execution, RunState

BITS_MAX_CELLS = 200_000_000
"""Largest n·m the bit-parallel LCS runs on (its traceback keeps n rows of m bits: 25 MB)."""

MYERS_MAX_D = 4000
"""Beyond this many edits the exact LCS gets expensive; difflib's matcher takes over."""


def _lcs_bits(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
    """Index pairs of one longest common subsequence (bit-parallel DP, exact).

    Row ``i`` is an ``m``-bit int whose zero bits below ``j`` count ``LCS(a[:i], b[:j])``
    (Allison-Dix / Hyyrö), so the traceback reads the DP table from the stored rows.
    """
    n, m = len(a), len(b)
    if not n or not m:
        return []
    full = (1 << m) - 1
    match: dict[str, int] = {}
    for j, item in enumerate(b):
        match[item] = match.get(item, 0) | (1 << j)
    rows = [full]
    v = full
    for item in a:
        u = v & match.get(item, 0)
        v = ((v + u) | (v - u)) & full
        rows.append(v)
    pairs: list[tuple[int, int]] = []
    i, j = n, m
    while i and j:
        if a[i - 1] == b[j - 1]:
            i, j = i - 1, j - 1
            pairs.append((i, j))
            continue
        low = (1 << j) - 1
        up = j - (rows[i - 1] & low).bit_count()  # LCS(a[:i-1], b[:j])
        left = j - 1 - (rows[i] & (low >> 1)).bit_count()  # LCS(a[:i], b[:j-1])
        if up >= left:
            i -= 1
        else:
            j -= 1
    pairs.reverse()
    return pairs


def _myers(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
    """Index pairs of one longest common subsequence of ``a`` and ``b``."""
    n, m = len(a), len(b)
    offset = n + m + 1
    v = [0] * (2 * offset + 1)
    trace: list[list[int]] = []
    for d in range(n + m + 1):
        if d > MYERS_MAX_D:
            blocks = difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks()
            return [(blk.a + i, blk.b + i) for blk in blocks for i in range(blk.size)]
        trace.append(v[offset - d - 1: offset + d + 2])
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                x = v[offset + k + 1]
            else:
                x = v[offset + k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            v[offset + k] = x
            if x >= n and y >= m:
                return _backtrack(trace, a, b, d)
    return []  # pragma: no cover - the loop always returns


def _backtrack(trace: list[list[int]], a: Sequence[str], b: Sequence[str],
               d_end: int) -> list[tuple[int, int]]:
    pairs: list[tuple[int, int]] = []
    x, y = len(a), len(b)
    for d in range(d_end, -1, -1):
        row = trace[d]  # row[j] is V[k] for k = j - d - 1

        def at(k: int, row: list[int] = row, d: int = d) -> int:
            return row[k + d + 1]

        k = x - y
        if d == 0:
            prev_k = 0
        elif k == -d or (k != d and at(k - 1) < at(k + 1)):
            prev_k = k + 1
        else:
            prev_k = k - 1
        prev_x = at(prev_k) if d > 0 else 0
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:
            x, y = x - 1, y - 1
            pairs.append((x, y))
        if d > 0:
            x, y = prev_x, prev_y
    pairs.reverse()
    return pairs


def lcs_pairs(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
    """LCS index pairs, with the common prefix and suffix matched directly."""
    start = 0
    while start < len(a) and start < len(b) and a[start] == b[start]:
        start += 1
    end = 0
    while (end < len(a) - start and end < len(b) - start
           and a[len(a) - 1 - end] == b[len(b) - 1 - end]):
        end += 1
    a_mid, b_mid = a[start:len(a) - end], b[start:len(b) - end]
    exact = len(a_mid) * len(b_mid) <= BITS_MAX_CELLS
    middle = _lcs_bits(a_mid, b_mid) if exact else _myers(a_mid, b_mid)
    head = [(i, i) for i in range(start)]
    mid = [(i + start, j + start) for i, j in middle]
    tail = [(len(a) - end + i, len(b) - end + i) for i in range(end)]
    return head + mid + tail


@dataclass
class RunDiff:
    divergence: dict[str, Any] | None
    path: dict[str, Any]
    memory: dict[str, dict[str, Any]]
    terminal: dict[str, Any]
    cost: dict[str, Any]
    suppressed_effects: list[dict[str, Any]]
    attribution: str = "single"
    score: dict[str, Any] | None = None
    changes: list[str] = field(default_factory=list)

    def wire(self) -> dict[str, Any]:
        data = {"divergence": self.divergence, "path": self.path, "memory": self.memory,
                "terminal": self.terminal, "cost": self.cost,
                "suppressed_effects": self.suppressed_effects,
                "attribution": self.attribution}
        if self.score is not None:
            data["score"] = self.score
        return data


def _step(ex: Execution | None) -> dict[str, Any] | None:
    return None if ex is None else ex.path_entry()


def _same_json(x: Any, y: Any) -> bool:
    """Exact equality of JSON values without serializing (bool, int and float differ)."""
    if type(x) is not type(y):
        return False
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_same_json(v, y[k]) for k, v in x.items())
    if isinstance(x, list):
        return len(x) == len(y) and all(_same_json(p, q) for p, q in zip(x, y, strict=True))
    return bool(x == y)


def _loose(x: Any) -> bool:
    """True when ``x`` holds a value canonical JSON may equate with another (None, a float)."""
    if x is None or isinstance(x, float):
        return True
    if isinstance(x, dict):
        return any(_loose(v) for v in x.values())
    if isinstance(x, list):
        return any(_loose(v) for v in x)
    return False


def _same_output(a: Execution, b: Execution) -> bool:
    """Same writes, deletes, route and status, as canonical JSON compares them."""
    if a.route != b.route or a.status != b.status or a.deletes != b.deletes:
        return False
    left, right = a.writes, b.writes
    # Python's == is looser than JSON (True == 1), so it can only rule a pair out; the exact
    # check settles the rest, and canonical JSON only where a None-valued key (absent) or a
    # float (1.0 vs 1) can make unequal-looking values equal
    if left == right and _same_json(left, right):
        return True
    if not (_loose(left) or _loose(right)):
        return False
    return canonical_json(left) == canonical_json(right)


def _skipped(ex: Execution, unreached: list[Execution] | None) -> dict[str, Any]:
    if unreached is None:
        return {"op": "skipped", "base": _step(ex), "variant": None}
    unreached.append(ex)
    return {"op": "skipped", "base": _step(ex), "variant": None, "not_reached": True}


def _align(base: list[Execution], variant: list[Execution], inherited: int,
           unreached: list[Execution] | None = None) -> list[dict[str, Any]]:
    """Aligned steps. With ``unreached`` (a list: the variant stopped early) and no variant
    execution after the last step both runs share, the base steps after that one are flagged
    ``not_reached`` (still op ``skipped``) and collected there; had the variant gone on
    elsewhere, they are plain skips (it took another route)."""
    pairs = lcs_pairs([e.node for e in base], [e.node for e in variant])
    steps: list[dict[str, Any]] = []
    bi = vi = 0

    def gap(b_end: int, v_end: int, tail: list[Execution] | None = None) -> None:
        nonlocal bi, vi
        if bi == b_end and vi == v_end:  # no gap (every pair of a fork's shared path)
            return
        only_b, only_v = base[bi:b_end], variant[vi:v_end]
        if only_v:  # the variant went elsewhere after the last step both ran: a skip
            tail = None
        if not {e.node for e in only_b} & {v.node for v in only_v}:
            # nothing to coalesce (always so after an exact LCS): no pairwise search
            steps.extend(_skipped(e, tail) for e in only_b)
            only_b = []
        for ex in only_b:  # coalesce a same-node deletion+insertion into one changed step
            twin = next((v for v in only_v if v.node == ex.node), None)
            if twin is not None:
                only_v.remove(twin)
                steps.append({"op": "changed", "base": _step(ex), "variant": _step(twin)})
            else:
                steps.append(_skipped(ex, tail))
        steps.extend({"op": "inserted", "base": None, "variant": _step(v)} for v in only_v)
        bi, vi = b_end, v_end

    for i, j in pairs:
        gap(i, j)
        b, v = base[i], variant[j]
        reused = j < inherited or v.memo or _same_output(b, v)
        steps.append({"op": "same" if reused else "changed", "base": _step(b),
                      "variant": _step(v)})
        bi, vi = i + 1, j + 1
    gap(len(base), len(variant), unreached)
    return steps


_PLAIN = frozenset({str, int, bool})


def _same_value(a: Any, b: Any) -> bool:
    """Whether two memory values have the same canonical JSON. Two strings, integers or
    booleans of the same exact type have it exactly when they are equal (their JSON text
    is a function of the value, different for different values), so the common case — a
    fork's copy of a model's text — is one comparison instead of two serialisations."""
    if type(a) is type(b) and type(a) in _PLAIN:
        return bool(a == b)
    return canonical_json(a) == canonical_json(b)


def _memory(base: RunState, variant: RunState) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(set(base.memory) | set(variant.memory)):
        in_b, in_v = key in base.memory, key in variant.memory
        b_val, v_val = base.memory.get(key), variant.memory.get(key)
        taint_moved = (key in base.taint) != (key in variant.taint)
        if in_b and in_v and _same_value(b_val, v_val) and not taint_moved:
            continue
        op = "added" if not in_b else "removed" if not in_v else "changed"
        delta = (json_size(v_val) if in_v else 0) - (json_size(b_val) if in_b else 0)
        out[key] = {"op": op, "bytes_delta": delta, "taint_moved": taint_moved,
                    "base": b_val, "variant": v_val}
    return out


def _per_node(base: list[Execution], variant: list[Execution]) -> dict[str, dict[str, float]]:
    nodes: dict[str, dict[str, float]] = {}
    for side, executions in (("base_usd", base), ("variant_usd", variant)):
        for ex in executions:
            entry = nodes.setdefault(ex.node, {"base_usd": 0.0, "variant_usd": 0.0})
            entry[side] += ex.cost_usd
    for entry in nodes.values():
        entry["base_usd"] = round(entry["base_usd"], 8)
        entry["variant_usd"] = round(entry["variant_usd"], 8)
        entry["delta_usd"] = round(entry["variant_usd"] - entry["base_usd"], 8)
    return nodes


def incurred_usd(variant: RunState) -> float | None:
    """What a fork's tail itself paid: live and changed calls after the fork point.

    None when one of them called a model with no price: the spend is unknown, and a partial
    sum would read as a saving (SPEC §3.4: an unpriced call is never reported as $0)."""
    start = variant.tail_from_call
    paid = [c.cost_usd for c in variant.calls[start:] if c.label in ("live", "changed")]
    if any(cost is None for cost in paid):
        return None
    return round(sum((cost or 0.0 for cost in paid), 0.0), 10)


def usd_text(amount: float | None) -> str:
    """``$0.0034``, or ``unpriced`` for an unknown amount."""
    return "unpriced" if amount is None else f"${amount:.4f}"


STOPPED_EARLY = frozenset({"failed", "blocked", "cancelled", "paused", "running", "queued"})
"""A variant in one of these statuses did not run to its end: base steps after its last one
are "not reached", not skipped, and stay out of the token, cost and time deltas."""


@dataclass(frozen=True)
class _Reached:
    """The base as far as the variant got: totals without the steps it never reached."""

    executions: list[Execution]
    tokens: int
    usd: float
    duration_ms: float


def _after_call(base: RunState, key: str | None) -> list[Call]:
    """The base's calls after call ``key`` in the same execution: a one-call fork ended
    after ``key``, so they were not re-executed either (kept out of the deltas)."""
    found = next((c for c in base.calls if c.call == key), None) if key else None
    if found is None:
        return []
    return [c for c in base.calls if (c.node, c.occurrence) == (found.node, found.occurrence)
            and c.seq > found.seq]


def _reached(base: RunState, unreached: list[Execution], later: list[Call]) -> _Reached:
    skip = {id(ex) for ex in unreached}
    kept = [ex for ex in base.executions if id(ex) not in skip]
    tokens = base.input_tokens + base.output_tokens - sum(
        ex.input_tokens + ex.output_tokens for ex in unreached) - sum(
        c.input_tokens + c.output_tokens for c in later)
    usd = base.cost_usd - sum(ex.cost_usd for ex in unreached) - sum(
        c.cost_usd or 0.0 for c in later)
    duration = base.duration_ms
    if unreached and base.started_at is not None:  # the base's clock up to the first one
        duration = round((min(ex.started_at for ex in unreached) - base.started_at) * 1000, 3)
    return _Reached(executions=kept, tokens=tokens, usd=usd, duration_ms=duration)


def _not_reached(aligned: list[dict[str, Any]]) -> dict[str, list[str]]:
    """``{"not_reached": [nodes]}`` when the variant stopped early (else nothing: the wire
    shape of a diff whose variant finished stays as SPEC §4.6 writes it)."""
    nodes = [s["base"]["node"] for s in aligned if s.get("not_reached")]
    return {"not_reached": nodes} if nodes else {}


def _one_call(key: str | None, aligned: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"one_call", "not_reexecuted"}`` of a one-call fork's diff: the call it re-asked
    and the base steps after it, which it did not re-execute (not skipped by its change)."""
    if key is None:
        return {}
    return {"one_call": key, "not_reexecuted": [
        s["base"]["node"] for s in aligned if s.get("not_reached")]}


def diff_runs(base_state: RunState, variant_state: RunState, *,
              scorer: Callable[[RunState], float] | None = None,
              changes: Sequence[str] = ()) -> RunDiff:
    """Compare two final states. Pure; O(n + m + D^2) in path lengths.

    When the variant stopped early (``STOPPED_EARLY``), the base steps it never reached are
    flagged ``not_reached`` and listed in ``path.not_reached``; tokens, cost (per node too)
    and wall-clock deltas compare the variant with the base up to where the variant got.
    """
    inherited = variant_state.prefix_executions
    # a one-call fork of an imported run (SPEC §8 (a)) ends after its call on purpose: the
    # base's later steps were not re-executed (not reached), and no memory was re-derived
    one_call = variant_state.fork.one_call if variant_state.fork is not None else None
    unreached: list[Execution] | None = (
        [] if variant_state.status in STOPPED_EARLY or one_call else None)
    aligned = _align(base_state.executions, variant_state.executions, inherited, unreached)
    reached = _reached(base_state, unreached or [], _after_call(base_state, one_call))
    first = next((i for i, s in enumerate(aligned) if s["op"] != "same"), None)
    divergence = None if first is None else {
        "index": first,
        "base": (aligned[first]["base"] or {}).get("node"),
        "variant": (aligned[first]["variant"] or {}).get("node"),
    }
    diff = RunDiff(
        divergence=divergence,
        path={"aligned": aligned,
              "inserted": [s["variant"]["node"] for s in aligned if s["op"] == "inserted"],
              "skipped": [s["base"]["node"] for s in aligned if s["op"] == "skipped"
                          and not (one_call and s.get("not_reached"))],
              **_not_reached(aligned), **_one_call(one_call, aligned)},
        memory={} if one_call else _memory(base_state, variant_state),
        terminal={"base": base_state.status, "variant": variant_state.status,
                  "iterations_delta": variant_state.iteration - base_state.iteration,
                  "wall_clock_delta_ms": round(variant_state.duration_ms
                                               - reached.duration_ms, 3)},
        cost={"tokens_delta": variant_state.input_tokens + variant_state.output_tokens
              - reached.tokens,
              # unknown when either side called an unpriced model: never shown as a saving
              "usd_delta": None if base_state.unpriced_calls or variant_state.unpriced_calls
              else round(variant_state.cost_usd - reached.usd, 8),
              "incurred_usd": incurred_usd(variant_state),
              "per_node": _per_node(reached.executions, variant_state.executions)},
        suppressed_effects=list(variant_state.suppressed_effects),
        attribution="combined" if len(changes) > 1 else "single",
        changes=list(changes),
    )
    if scorer is not None:
        b, v = float(scorer(base_state)), float(scorer(variant_state))
        diff.score = {"base": b, "variant": v, "delta": round(v - b, 10)}
    return diff


def _render_path(diff: RunDiff) -> str:
    parts = []
    for step in diff.path["aligned"]:
        if step.get("not_reached"):
            parts.append(f"?{step['base']['node']}")
        elif step["op"] == "skipped":
            parts.append(f"-{step['base']['node']}")
        elif step["op"] == "inserted":
            parts.append(f"+{step['variant']['node']}")
        elif step["op"] == "changed":
            parts.append(f"{step['variant']['node']}@fork")
        else:
            parts.append(step["variant"]["node"])
    return " → ".join(parts) or "(no nodes)"


def _render_memory(diff: RunDiff) -> str:
    marks = {"added": "+", "removed": "-", "changed": "~"}
    items = [f"{marks[d['op']]}{k} ({d['bytes_delta']:+d}B{', taint moved' if d['taint_moved'] else ''})"
             for k, d in diff.memory.items()]
    return ", ".join(items) or "unchanged"


def format_run_diff(diff: RunDiff, header: str = "") -> str:
    """Render a diff as the block ``explain()`` prints."""
    lines = [header] if header else []
    if diff.changes:
        lines.append(f"  change    {'; '.join(diff.changes)}")
    status = diff.terminal["variant"]
    if diff.terminal["base"] != status:
        status += f" (base {diff.terminal['base']})"
    lines.append(f"  status    {status}")
    lines.append(f"  path      {_render_path(diff)}")
    if diff.path.get("one_call"):
        lines.append(f"  one call  only {diff.path['one_call']} was asked again: the trace's "
                     "later calls were not re-executed (?node), memory not compared")
    elif diff.path.get("not_reached"):
        lines.append(f"  unreached {len(diff.path['not_reached'])} base step(s) the variant "
                     "never reached (?node): left out of the deltas")
    lines.append(f"  cost      {usd_text(diff.cost['incurred_usd'])} incurred, "
                 f"{diff.cost['tokens_delta']:+d} tokens")
    lines.append(f"  memory    {_render_memory(diff)}")
    for effect in diff.suppressed_effects:
        lines.append(f"  blocked   {effect['node']}: {effect['reason']}")
    if diff.score is not None:
        lines.append(f"  score     {diff.score['base']} → {diff.score['variant']} "
                     f"({diff.score['delta']:+})")
    if diff.attribution == "combined":
        lines.append(f"  note      {len(diff.changes)} changes combined: the delta cannot be "
                     "attributed among them (run them as a sweep to isolate)")
    return "\n".join(lines)
