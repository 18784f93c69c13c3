"""The tools a model may choose (SPEC §6.1): what it is offered and how its calls are made.

A graph registers tools under ``tools:`` (:class:`~forklab.engine.graph.ToolSpec`); an agent
lists the ones it may call. Each is offered to the model as a
:class:`~forklab.engine.providers.ToolDefinition` whose JSON Schema is the spec's
``parameters`` or, when omitted, derived from the callable's typed signature:

- ``fn(args: Model, ctx)`` with ``Model`` a pydantic model or a ``TypedDict``: its schema,
  and ``args`` is validated into a ``Model`` before the call;
- ``fn(order_id: str, amount: float = 0, ctx=None)``: annotated keyword parameters (``ctx``
  aside) make the schema, and the call passes the arguments as keywords.

Otherwise the tool is ``fn(args: dict, ctx)`` as for a tool node and its schema is an open
object. Arguments the model writes are checked against the offered schema with
``jsonschema`` before the call: a call that fails is answered to the model as an error
result (:func:`check_arguments`), never run.

Invariants: the definition of a tool is a pure function of its spec and callable (it is part
of every request that offers it, and so of the request hash); nothing here imports Django.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, get_type_hints

from pydantic import BaseModel, TypeAdapter, ValidationError, create_model

from forklab.engine.graph import AgentSpec, GraphSpec, ToolSpec
from forklab.engine.providers import ToolDefinition
from forklab.engine.tools import ToolContext, ToolRegistry

OPEN_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class OfferedTool:
    """A registered tool as one agent offers it: spec, definition and how to call it."""

    name: str
    spec: ToolSpec
    definition: ToolDefinition
    invoke: Callable[[dict[str, Any], ToolContext], Any]


def offered_tools(graph: GraphSpec, agent: AgentSpec,
                  registry: ToolRegistry) -> dict[str, OfferedTool]:
    """The tools ``agent`` offers, by name, in the order it lists them. Resolving a
    callable may raise :class:`~forklab.engine.errors.ToolResolutionError`."""
    specs = graph.tools or {}
    return {name: _offered(name, specs[name], registry.resolve(specs[name].fn))
            for name in agent.tools or ()}


def _offered(name: str, spec: ToolSpec, fn: Callable[..., Any]) -> OfferedTool:
    derived, invoke = _calling_convention(fn)
    parameters = spec.parameters if spec.parameters is not None else derived
    return OfferedTool(name=name, spec=spec, invoke=invoke, definition=ToolDefinition(
        name=name, description=spec.description or _first_line(fn.__doc__),
        parameters=parameters))


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n", 1)[0].strip()


@lru_cache(maxsize=256)
def _calling_convention(fn: Callable[..., Any],
                        ) -> tuple[dict[str, Any], Callable[[dict[str, Any], ToolContext], Any]]:
    """(derived JSON Schema, ``invoke(args, ctx)``) for ``fn``'s signature (module
    docstring). Cached per callable: a signature does not change while a process runs."""
    try:
        signature = inspect.signature(fn)
        hints = get_type_hints(fn)
    except (TypeError, ValueError, NameError):
        return OPEN_OBJECT, lambda args, ctx: fn(dict(args), ctx)
    params = [p for p in signature.parameters.values() if p.name not in ("ctx", "context")]
    first = hints.get(params[0].name) if params else None
    if len(params) == 1 and first is not None and _is_model(first):
        adapter: TypeAdapter[Any] = TypeAdapter(first)
        return (_schema(adapter.json_schema()),
                lambda args, ctx: fn(adapter.validate_python(args), ctx))
    if params and all(p.name in hints for p in params) and not (
            len(params) == 1 and hints[params[0].name] in (dict, dict[str, Any])):
        fields: dict[str, Any] = {
            p.name: (hints[p.name], ... if p.default is inspect.Parameter.empty else p.default)
            for p in params}
        model = create_model(f"{getattr(fn, '__name__', 'tool')}_arguments", **fields)
        takes_ctx = any(p in signature.parameters for p in ("ctx", "context"))
        ctx_name = "ctx" if "ctx" in signature.parameters else "context"

        def by_keyword(args: dict[str, Any], ctx: ToolContext) -> Any:
            values = dict(model.model_validate(args))
            return fn(**values, **({ctx_name: ctx} if takes_ctx else {}))

        return _schema(model.model_json_schema()), by_keyword
    return OPEN_OBJECT, lambda args, ctx: fn(dict(args), ctx)


def _is_model(hint: Any) -> bool:
    if isinstance(hint, type) and issubclass(hint, BaseModel):
        return True
    return isinstance(hint, type) and hasattr(hint, "__required_keys__")  # a TypedDict


def _schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Pydantic's schema without its ``title`` keys (noise in every request)."""
    if isinstance(schema, dict):
        return {k: _schema(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_schema(v) for v in schema]
    return schema


def check_arguments(tool: OfferedTool, arguments: Any) -> str | None:
    """Why ``arguments`` cannot be passed to ``tool`` (text for the model), or None."""
    from jsonschema import Draft202012Validator  # on first tool call: a run without tools
    # never loads it

    if not isinstance(arguments, dict):
        return (f"arguments for {tool.name!r} must be a JSON object matching its parameters; "
                f"got {str(arguments)[:200]!r}")
    errors = sorted(Draft202012Validator(tool.definition.parameters).iter_errors(arguments),
                    key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    first = errors[0]
    where = "/".join(str(p) for p in first.absolute_path) or "(arguments)"
    return f"invalid arguments for {tool.name!r} at {where}: {first.message}"


def invocation_error(tool: OfferedTool, exc: ValidationError) -> str:
    return f"invalid arguments for {tool.name!r}: {exc.errors()[0]['msg']}"


__all__ = ["OPEN_OBJECT", "OfferedTool", "check_arguments", "invocation_error",
           "offered_tools"]
