"""``@forklab.workflow`` and ``@forklab.tool``."""

from __future__ import annotations

import asyncio
import functools
import inspect
import re
from collections.abc import Callable
from typing import Any, Literal, overload

from forklab.engine.workflow_node import current_scope
from forklab.sdk.instrument import instrument

_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def workflow[F: Callable[..., Any]](workflow_id: str) -> Callable[[F], F]:
    """Register ``fn`` as the workflow ``workflow_id`` (its graph id and node id).

    The function is returned unchanged (called outside forklab, it just runs); a run calls
    it with the run input's keys named by its parameters. Recording the vendor clients is
    switched on (:func:`~forklab.sdk.instrument.instrument`)."""
    if not _ID.match(workflow_id):
        raise ValueError(f"workflow id {workflow_id!r} must be an identifier (letters, "
                         "digits, _ or -): it names the run's graph and node")

    def register(fn: F) -> F:
        fn.__forklab_workflow__ = workflow_id  # type: ignore[attr-defined]
        instrument()
        return fn

    return register


@overload
def tool[F: Callable[..., Any]](fn: F, /) -> F: ...
@overload
def tool[F: Callable[..., Any]](*, effect: Literal["read", "write"] = "read",
                                trusted: bool = True,
                                name: str | None = None) -> Callable[[F], F]: ...
def tool(fn: Any = None, /, *, effect: Literal["read", "write"] = "read", trusted: bool = True,
         name: str | None = None) -> Any:
    """Make ``fn``'s calls recorded tool calls of the workflow running them (key
    ``tool:NAME#N``). ``effect="write"`` calls obey a fork's side-effect guard; an untrusted
    tool's result taints what the workflow writes. Arguments and result must be JSON values;
    inside a workflow the caller gets the result as JSON (what a fork serves). Outside any
    workflow the function just runs."""

    def decorate(fn: Any) -> Any:
        tool_name = name or fn.__name__
        path = f"{fn.__module__}.{fn.__qualname__}"
        signature = inspect.signature(fn)

        def arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            return dict(bound.arguments)

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                scope = current_scope()
                if scope is None:
                    return await fn(*args, **kwargs)
                loop = asyncio.get_running_loop()

                def invoke(a: dict[str, Any]) -> Any:
                    return asyncio.run_coroutine_threadsafe(fn(**a), loop).result()

                key = scope.tool_key(tool_name)  # on the loop: keyed in task order
                return await asyncio.to_thread(
                    scope.tool_call, tool_name, path, effect=effect, trusted=trusted,
                    args=arguments(args, kwargs), invoke=invoke, key=key)

            wrapped: Any = run_async
        else:
            @functools.wraps(fn)
            def run(*args: Any, **kwargs: Any) -> Any:
                scope = current_scope()
                if scope is None:
                    return fn(*args, **kwargs)
                return scope.tool_call(tool_name, path, effect=effect, trusted=trusted,
                                       args=arguments(args, kwargs),
                                       invoke=lambda a: fn(**a))

            wrapped = run
        wrapped.__forklab_tool__ = {"name": tool_name, "effect": effect, "trusted": trusted}
        return wrapped

    return decorate if fn is None else decorate(fn)


__all__ = ["tool", "workflow"]
