"""A hypothesis strategy for random VALID graphs (SPEC §1, semantics "Read slices").

A graph is a chain of *segments*, each wired to the next:

- ``single``  one agent / multi-agent / tool / approval / subgraph node;
- ``diamond`` a split node, two branches, and a ``join: all`` node reading both branches;
- ``branch``  a router (rules over its declared reads and ``$iteration``, or an agent answer)
  choosing a branch node, the next segment, or the end;
- ``loop``    a body node and a router sending it back until ``$iteration`` reaches a bound
  or a memory condition holds (the graph declares ``max_iterations``);
- ``fan``     a split node, two or three parallel branches of one or two nodes each (of
  unequal lengths, so one branch's second node starts after its siblings' first ones), and
  a ``join: all`` node reading what the branches wrote — branches may overwrite a key
  another one reads, so the order the log defines decides what each node saw.

Every node reads only keys it declares; some declare a key nothing ever writes (``ghost``),
so "a declared read of an absent key" happens. Subgraph nodes run child graphs that the case
saves in the store before recording. Tools are the deterministic ones of :mod:`world`.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from forklab.engine.graph import END, GraphSpec, parse_graph
from tests.engine.properties.world import (
    FLAKY_TOOL,
    PRICED_MODELS,
    READ_TOOL,
    REFLECT_TOOL,
    UNPRICED_MODEL,
    WORDS,
    WRITE_TOOL,
)

GHOST = "ghost"
"""A key some nodes declare as a read and nothing ever writes (absent unless patched in)."""

NEXT = "@next"
SEGMENTS = ("single", "diamond", "branch", "loop", "fan")
SINGLE_KINDS = ("agent", "multi", "tool", "approval", "subgraph")


@dataclass
class GraphCase:
    """A generated graph, the child graphs it runs, and the input to record it with."""

    graph: GraphSpec
    children: list[GraphSpec]
    input: dict[str, Any]

    def __repr__(self) -> str:  # what hypothesis prints for a falsifying example
        return "GraphCase(\n  graph=" + json.dumps(self.graph.to_wire()) + \
            ",\n  children=" + json.dumps([c.to_wire() for c in self.children]) + \
            ",\n  input=" + json.dumps(self.input) + ")"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))

    def node_ids(self, kind: str | None = None) -> list[str]:
        return [n.id for n in self.graph.nodes if kind is None or n.kind == kind]


@dataclass
class Options:
    segments: tuple[str, ...] = SEGMENTS
    singles: tuple[str, ...] = SINGLE_KINDS
    min_segments: int = 1
    max_segments: int = 5
    write_tools: bool = True
    flaky_tools: bool = True
    unpriced: bool = False
    untrusted: bool = True
    # how many times as likely as each other choice a flaky tool (of the tool paths) and the
    # unpriced model (of the models) are drawn: a property about what they do (a raised tool
    # call, an unpriced call) rejects every graph where they did not, and each rejected
    # graph is generated and recorded in full first
    flaky_weight: int = 1
    unpriced_weight: int = 1


@dataclass
class _Builder:
    draw: Any
    opts: Options
    graph_id: str
    nodes: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, str]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)  # present in memory by now
    fresh: int = 0
    loops: int = 0
    children: list[GraphSpec] = field(default_factory=list)
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)

    # -- small draws ---------------------------------------------------------------------
    def flag(self, p_true: float) -> bool:
        return bool(self.draw(st.integers(0, 99)) < p_true * 100)

    def new_id(self, letter: str) -> str:
        return f"{letter}{len(self.nodes) + len(self.children) * 10 + self.fresh_bump()}"

    def fresh_bump(self) -> int:
        self.fresh += 1
        return self.fresh

    def new_key(self) -> str:
        return f"k{self.fresh_bump()}"

    def reads(self, most: int = 3, ghost: bool = True) -> list[str]:
        pool = sorted(set(self.keys))
        chosen = self.draw(st.lists(st.sampled_from(pool), max_size=most, unique=True)) if pool else []
        if ghost and self.flag(0.15):
            chosen.append(GHOST)
        return chosen

    def write_key(self) -> str:
        """A fresh key, or sometimes one already in memory (an overwrite)."""
        overwrite = [k for k in self.keys if k != GHOST]
        if overwrite and self.flag(0.2):
            return str(self.draw(st.sampled_from(sorted(overwrite))))
        return self.new_key()

    def wrote(self, *keys: str | None) -> None:
        self.keys += [k for k in keys if k]

    def agent_spec(self) -> dict[str, Any]:
        models = PRICED_MODELS + (UNPRICED_MODEL,) * (self.opts.unpriced_weight
                                                      * self.opts.unpriced)
        spec: dict[str, Any] = {
            "model": self.draw(st.sampled_from(models)),
            "system_prompt": self.draw(st.sampled_from(["Be brief.", "Think it over.", ""])),
            "temperature": self.draw(st.sampled_from([0.0, 0.7])),
            "max_tokens": self.draw(st.sampled_from([16, 32, 48])),
        }
        if self.flag(0.2):
            spec["params"] = {"style": self.draw(st.sampled_from(["plain", "formal"]))}
        return spec

    def agent_ref(self) -> Any:
        """A shared agent (by id, from the graph's registry) or an inline one."""
        if self.flag(0.4):
            name = self.draw(st.sampled_from(["shared1", "shared2"]))
            self.agents.setdefault(name, self.agent_spec())
            return name
        return self.agent_spec()

    def prompt(self, reads: list[str]) -> str:
        if not reads or self.flag(0.3):
            return ""  # renders the whole read slice
        used = self.draw(st.lists(st.sampled_from(reads), min_size=1, unique=True))
        return "Work on " + " and ".join(f"{{{k}}}" for k in used)

    # -- nodes ---------------------------------------------------------------------------
    def add(self, node: dict[str, Any]) -> str:
        self.nodes.append(node)
        return str(node["id"])

    def agent(self, reads: list[str] | None = None, choices: bool | None = None) -> str:
        reads = self.reads() if reads is None else reads
        node: dict[str, Any] = {"id": self.new_id("a"), "kind": "agent", "reads": reads,
                                "agent": self.agent_ref(), "prompt": self.prompt(reads)}
        if self.flag(0.35) if choices is None else choices:
            node["choices"] = ["yes", "no"]
        key = self.write_key()
        node["writes"] = [key]
        self.wrote(key)
        return self.add(node)

    def multi(self) -> str:
        reads = self.reads()
        roles: dict[str, Any] = {}
        writes: list[str] = []
        for name in self.draw(st.sampled_from([["voters"], ["voters", "judge"], ["judge", "voters"]])):
            count = self.draw(st.integers(1, 3)) if name == "voters" else 1
            role: dict[str, Any] = {"agent": self.agent_ref(), "count": count}
            if name == "voters" and self.flag(0.5):
                role["choices"] = ["yes", "no"]
            if count > 1 and self.flag(0.4):
                role["instances"] = {str(count - 1): self.agent_spec()}
            if self.flag(0.85):
                role["writes"] = self.new_key()
                writes.append(role["writes"])
            roles[name] = role
        node = {"id": self.new_id("m"), "kind": "agent", "reads": reads, "roles": roles,
                "role_order": list(roles), "prompt": self.prompt(reads), "writes": writes}
        self.wrote(*writes)
        return self.add(node)

    def tool(self, path: str | None = None, reads: list[str] | None = None) -> str:
        paths = [READ_TOOL, REFLECT_TOOL] + [WRITE_TOOL] * self.opts.write_tools
        paths += [FLAKY_TOOL] * (self.opts.flaky_weight * self.opts.flaky_tools)
        path = path or self.draw(st.sampled_from(paths))
        reads = self.reads() if reads is None else reads
        writes = [self.write_key() for _ in range(self.draw(st.integers(0 if path == WRITE_TOOL else 1, 2)))]
        writes = list(dict.fromkeys(writes))
        node = {"id": self.new_id("t"), "kind": "tool", "tool": path, "reads": reads,
                "writes": writes, "effect": "write" if path == WRITE_TOOL else "read",
                "trusted": not (self.opts.untrusted and self.flag(0.3)),
                "params": {"salt": self.draw(st.integers(0, 3)), "out": writes}}
        self.wrote(*writes)
        return self.add(node)

    def approval(self) -> str:
        reads = self.reads(most=2)
        key = self.new_key()
        node = {"id": self.new_id("h"), "kind": "approval", "reads": reads, "writes": [key],
                "prompt": "Release?", "on_reject": self.draw(st.sampled_from([END, NEXT]))}
        self.wrote(key)
        return self.add(node)

    def subgraph(self) -> str:
        reads = [k for k in self.reads() if k != GHOST] or []
        mapping = {f"c_{k}": k for k in reads}
        child = _child(self.draw, self.opts, f"{self.graph_id}-child{len(self.children) + 1}",
                       list(mapping))
        self.children.append(child)
        written = sorted({k for n in child.nodes for k in n.writes} | set(mapping))
        outputs = {}
        for child_key in self.draw(st.lists(st.sampled_from(written), min_size=1, max_size=2,
                                             unique=True)) if written else []:
            outputs[self.write_key()] = child_key
        node = {"id": self.new_id("s"), "kind": "subgraph", "graph": child.id, "reads": reads,
                "input": mapping, "output": outputs, "writes": list(outputs)}
        self.wrote(*outputs)
        return self.add(node)

    def single(self, kinds: tuple[str, ...] | None = None) -> str:
        kind = self.draw(st.sampled_from(kinds or self.opts.singles))
        return {"agent": self.agent, "multi": self.multi, "tool": self.tool,
                "approval": self.approval, "subgraph": self.subgraph}[kind]()

    # -- segments ------------------------------------------------------------------------
    def condition(self, reads: list[str]) -> dict[str, Any]:
        if not reads or self.flag(0.25):
            return {"key": "$iteration", "op": self.draw(st.sampled_from(["gte", "eq"])),
                    "value": self.draw(st.integers(1, 2))}
        key = self.draw(st.sampled_from(reads))
        op = self.draw(st.sampled_from(["eq", "ne", "exists", "truthy", "contains", "in"]))
        value: Any = None
        if op in ("eq", "ne"):
            value = self.draw(st.sampled_from(WORDS))
        elif op == "contains":
            value = self.draw(st.sampled_from(["e", "the", "yes"]))
        elif op == "in":
            value = list(self.draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=2,
                                            unique=True)))
        return {"key": key, "op": op, "value": value}

    def segment(self, kind: str) -> tuple[str, list[str]]:
        """Build one segment; (entry node, exit nodes whose edges go to the next one)."""
        if kind == "single":
            node = self.single()
            return node, [node]
        if kind == "diamond":
            split = self.single(("agent", "tool"))
            left = self.single(("agent", "tool", "multi"))
            right = self.single(("agent", "tool"))
            reads = sorted({*self.nodes[-1]["writes"], *self.node(left)["writes"]})[:3]
            join = self.agent(reads=reads)
            self.node(join)["join"] = "all"
            self.edges += [{"from": split, "to": left}, {"from": split, "to": right},
                           {"from": left, "to": join}, {"from": right, "to": join}]
            return split, [join]
        if kind == "branch":
            return self.branch()
        if kind == "fan":
            return self.fan()
        return self.loop()

    def fan(self) -> tuple[str, list[str]]:
        split = self.single(("agent", "tool"))
        ends: list[str] = []
        written: set[str] = set()
        for _ in range(self.draw(st.integers(2, 3))):
            previous = split
            for _ in range(self.draw(st.integers(1, 2))):
                node = self.single(("agent", "tool", "multi"))
                self.edges.append({"from": previous, "to": node})
                written.update(self.node(node)["writes"])
                previous = node
            ends.append(previous)
        reads = self.draw(st.lists(st.sampled_from(sorted(written)), max_size=3, unique=True)) \
            if written else []
        join = self.agent(reads=reads)
        self.node(join)["join"] = "all"
        self.edges += [{"from": end, "to": join} for end in ends]
        return split, [join]

    def node(self, node_id: str) -> dict[str, Any]:
        return next(n for n in self.nodes if n["id"] == node_id)

    def branch(self) -> tuple[str, list[str]]:
        reads = self.reads(most=2)
        router: dict[str, Any] = {"id": self.new_id("r"), "kind": "router", "reads": reads}
        self.add(router)
        target = self.single(("agent", "tool", "approval", "multi"))
        other = NEXT if self.flag(0.5) else END
        if self.flag(0.25):
            # not in sorted order: a stored graph comes back with sorted keys, and an agent
            # router's request must not depend on the order its choices were written in
            router.update(agent=self.agent_ref(), prompt=self.prompt(reads),
                          choices={"yes": target, "no": other})
        else:
            rules = [{"when": [self.condition(reads)], "to": target}]
            if self.flag(0.3):
                rules.append({"when": [self.condition(reads), self.condition(reads)],
                              "to": other})
            router.update(rules=rules, default=self.draw(st.sampled_from([target, other])))
        if self.flag(0.3):
            key = self.new_key()
            router["writes"] = [key]
            self.wrote(key)
        return router["id"], [target]

    def loop(self) -> tuple[str, list[str]]:
        self.loops += 1
        body = self.single(("agent", "tool", "multi"))
        node = self.node(body)
        if node["writes"] and self.flag(0.6):  # feedback: each pass reads the last one's output
            fed = node["writes"][0]
            if fed not in node["reads"]:
                node["reads"].append(fed)
        reads = sorted(set(self.node(body)["writes"]) | set(self.reads(most=1)))[:2]
        bound = self.draw(st.integers(2, 3))
        rules = [{"when": [{"key": "$iteration", "op": "gte", "value": bound}], "to": NEXT}]
        if reads and self.flag(0.6):
            rules.insert(self.draw(st.integers(0, 1)), {"when": [self.condition(reads)], "to": NEXT})
        router = {"id": self.new_id("r"), "kind": "router", "reads": reads, "rules": rules,
                  "default": body}
        self.add(router)
        self.edges.append({"from": body, "to": router["id"]})
        return body, []  # the router's rules lead on; it has no static edge

    def build(self) -> GraphSpec:
        count = self.draw(st.integers(self.opts.min_segments, self.opts.max_segments))
        kinds = [self.draw(st.sampled_from(self.opts.segments)) for _ in range(count)]
        pending: list[dict[str, Any]] = []
        exits: list[str] = []
        start = None
        for kind in kinds:
            first = len(self.nodes)
            entry, new_exits = self.segment(kind)
            start = start or entry
            self._link(pending, exits, entry)
            pending, exits = self.nodes[first:], new_exits
        self._link(pending, exits, END)
        data: dict[str, Any] = {"id": self.graph_id, "start": start, "nodes": self.nodes,
                                "edges": self.edges, "agents": self.agents}
        if self.loops:
            data["max_iterations"] = 4
        return parse_graph(data)

    def _link(self, nodes: list[dict[str, Any]], exits: list[str], entry: str) -> None:
        """Point the previous segment's ``@next`` targets and exits at ``entry``."""
        for node in nodes:
            for rule in node.get("rules", []):
                rule["to"] = entry if rule["to"] == NEXT else rule["to"]
            for field_ in ("default", "on_reject"):
                if node.get(field_) == NEXT:
                    node[field_] = entry
            if node.get("choices") and isinstance(node["choices"], dict):
                node["choices"] = {a: entry if t == NEXT else t for a, t in node["choices"].items()}
        if entry != END:
            self.edges += [{"from": e, "to": entry} for e in exits]


def _child(draw: Any, opts: Options, graph_id: str, inputs: list[str]) -> GraphSpec:
    """A child graph: a short chain of agent and tool nodes over the mapped inputs."""
    child = _Builder(draw, Options(write_tools=False, flaky_tools=False,
                                   unpriced=opts.unpriced, unpriced_weight=opts.unpriced_weight,
                                   untrusted=opts.untrusted), graph_id)
    child.keys = list(inputs)
    ids = [child.single(("agent", "tool")) for _ in range(draw(st.integers(1, 3)))]
    child.edges = [{"from": a, "to": b} for a, b in itertools.pairwise(ids)]
    return parse_graph({"id": graph_id, "start": ids[0], "nodes": child.nodes,
                        "edges": child.edges, "agents": child.agents})


VALUES = st.one_of(st.sampled_from(WORDS), st.integers(0, 3),
                   st.fixed_dictionaries({"n": st.integers(0, 2)}))
MEMORY_VALUES = st.one_of(VALUES, st.none())
"""What a memory change sets: ``None`` too (present-but-null is not absent)."""


@st.composite
def graph_cases(draw: Any, options: Options | None = None, graph_id: str = "g") -> GraphCase:
    """A valid graph, its child graphs and an input (some input keys nobody reads)."""
    opts = options or Options()
    builder = _Builder(draw, opts, graph_id)
    names = [f"i{i}" for i in range(draw(st.integers(1, 3)))]
    inputs = {name: draw(VALUES) for name in names}
    builder.keys = list(inputs)
    graph = builder.build()
    return GraphCase(graph=graph, children=builder.children, input=inputs)


PATH_STABLE = Options(segments=("single", "diamond", "fan"), singles=("agent", "multi", "tool", "subgraph"),
                      flaky_tools=False)
"""No routers, loops, gates or failing tools: every fork takes the base's path."""
