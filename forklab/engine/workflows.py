"""Workflows: code-first agents a ``workflow`` node runs, by ``module:function`` (SPEC §7).

As for tools (:mod:`forklab.engine.tools`), only modules under an allowed prefix can be
imported: a run's graph arrives over the API, and it must not be able to name any function
of the process.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from forklab.engine.errors import WorkflowResolutionError
from forklab.engine.graph import GraphSpec, WorkflowNode

WorkflowFn = Callable[..., Any]

DEFAULT_WORKFLOW_PREFIXES = ("forklab.demo_agents.",)


class WorkflowRegistry:
    """Resolves ``module:function`` to a callable, restricted to allowed module prefixes."""

    def __init__(self, allowed_prefixes: Iterable[str] = DEFAULT_WORKFLOW_PREFIXES) -> None:
        self.allowed_prefixes = tuple(allowed_prefixes)
        self._registered: dict[str, WorkflowFn] = {}

    def register(self, path: str, fn: WorkflowFn) -> None:
        """Register a callable under ``module:function`` (tests, embedding applications)."""
        self._registered[path] = fn

    def allows(self, path: str) -> bool:
        """Whether ``path``'s module is under an allowed prefix (or it was registered)."""
        module = path.partition(":")[0]
        return path in self._registered or any(
            f"{module}.".startswith(prefix) for prefix in self.allowed_prefixes)

    def resolve(self, path: str) -> WorkflowFn:
        """The function ``path`` names; raises ``WorkflowResolutionError`` (code
        ``unknown_workflow``) saying what was expected and what to do."""
        if path in self._registered:
            return self._registered[path]
        module_name, sep, attr = path.partition(":")
        if not sep or not module_name or not attr:
            raise WorkflowResolutionError(
                f"workflow {path!r} is not of the form 'module:function' "
                "(e.g. 'acme.agents:support')", workflow=path)
        if not self.allows(path):
            raise WorkflowResolutionError(
                f"workflow {path!r} is outside the allowed modules "
                f"({', '.join(self.allowed_prefixes) or 'none'}); add its module prefix to "
                "FORKLAB_WORKFLOW_MODULES", workflow=path)
        try:
            fn = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise WorkflowResolutionError(f"cannot import workflow {path!r}: {exc}",
                                          workflow=path) from None
        if not callable(fn):
            raise WorkflowResolutionError(f"workflow {path!r} is not callable", workflow=path)
        return fn  # type: ignore[no-any-return]


def workflow_reads(fn: WorkflowFn) -> list[str]:
    """The input keys a workflow reads: its parameters that can be passed by name."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in inspect.signature(fn).parameters.values() if p.kind in kinds]


def workflow_required(fn: WorkflowFn) -> list[str]:
    """The input keys a workflow cannot run without: its by-name parameters with no default."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in inspect.signature(fn).parameters.values()
            if p.kind in kinds and p.default is inspect.Parameter.empty]


def declared_tools(fn: WorkflowFn) -> dict[str, str]:
    """The ``@forklab.tool`` functions of a workflow's module, by tool name: their effect
    (``read`` | ``write``). What a workflow recording made from a trace labels its tool
    calls with; the guard itself decides on the code's own declaration when it runs."""
    found: dict[str, str] = {}
    for value in list(getattr(fn, "__globals__", {}).values()):
        declared = getattr(value, "__forklab_tool__", None)
        if isinstance(declared, dict) and isinstance(declared.get("name"), str):
            found[declared["name"]] = str(declared.get("effect", "read"))
    return found


def workflow_graph(registry: WorkflowRegistry, path: str) -> GraphSpec:
    """The graph a run of workflow ``path`` records: one ``workflow`` node whose id (and
    the graph's) is the id given to ``@forklab.workflow``, reading the function's
    parameters, writing ``output``. Stored and versioned like any graph.

    Raises ``WorkflowResolutionError`` when ``path`` cannot be run here or was not
    decorated."""
    fn = registry.resolve(path)
    workflow_id = getattr(fn, "__forklab_workflow__", None)
    if not isinstance(workflow_id, str):
        raise WorkflowResolutionError(
            f"{path!r} is not a registered workflow; decorate it with "
            "@forklab.workflow(\"<id>\") so its runs have a stable id", workflow=path)
    node = WorkflowNode(id=workflow_id, fn=path, reads=workflow_reads(fn))
    return GraphSpec(id=workflow_id, name=workflow_id,
                     description=(inspect.getdoc(fn) or "").split("\n\n")[0],
                     start=workflow_id, nodes=[node])


__all__ = ["DEFAULT_WORKFLOW_PREFIXES", "WorkflowFn", "WorkflowRegistry", "declared_tools",
           "workflow_graph", "workflow_reads", "workflow_required"]
