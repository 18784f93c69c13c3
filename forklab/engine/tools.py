"""Tools: registered Python callables a ``tool`` node calls by dotted path.

A tool is ``fn(args: dict, ctx: ToolContext) -> Any``. ``args`` is the node's ``params``
overlaid with its read slice. It returns either a mapping of memory keys (each must be one
of the node's ``writes``) or a single value, written to the node's only ``writes`` key.

Only modules under an allowed prefix can be imported (graphs arrive over the API; a graph
must not be able to name ``os.system``).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from forklab.engine.errors import ToolResolutionError

ToolFn = Callable[[dict[str, Any], "ToolContext"], Any]

DEFAULT_TOOL_PREFIXES = ("forklab.engine.scenarios.",)


class ReflectionStore:
    """A store shared across runs (lessons, long-term memory). Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, Any]] = {}

    def write(self, store: str, key: str, value: Any) -> None:
        with self._lock:
            self._data.setdefault(store, {})[key] = value

    def read(self, store: str) -> dict[str, Any]:
        with self._lock:
            return dict(self._data.get(store, {}))


@dataclass
class ToolContext:
    """What a tool may touch besides its args. Fork tails capture ``reflect`` writes."""

    run_id: str
    node: str
    occurrence: int
    reflections: ReflectionStore
    capture_reflections: bool = False
    captured: list[dict[str, Any]] = field(default_factory=list)
    # how ``ask`` reaches the run: set by the engine (``engine.tool_asks``) for a tool it runs
    asker: Callable[..., str] | None = None

    def ask(self, agent: Any, messages: str | list[dict[str, Any]], **params: Any) -> str:
        """Ask a model from inside the tool (SPEC §6.4): ``agent`` is an agent id of the
        graph's registry, an agent spec (dict) or an ``AgentSpec``; ``messages`` a prompt or
        a message list; ``params`` override agent settings (``model``, ``temperature``…).
        The call is recorded under the tool's call key (``…/tool:1/ask:1``), priced,
        counted in a fork's budget and served from the log in forks. Returns the text."""
        if self.asker is None:
            raise RuntimeError("ctx.ask is only available to a tool the engine runs")
        return self.asker(agent, messages, **params)

    def reflect(self, store: str, key: str, value: Any) -> None:
        """Write to a cross-run store; inside a fork the write is captured and discarded."""
        if self.capture_reflections:
            self.captured.append({"store": store, "key": key, "value": value})
        else:
            self.reflections.write(store, key, value)


class ToolRegistry:
    """Resolves dotted paths to callables, restricted to allowed module prefixes."""

    def __init__(self, allowed_prefixes: Iterable[str] = DEFAULT_TOOL_PREFIXES) -> None:
        self.allowed_prefixes = tuple(allowed_prefixes)
        self._cache: dict[str, ToolFn] = {}
        self._registered: dict[str, ToolFn] = {}

    def register(self, path: str, fn: ToolFn) -> None:
        """Register a callable under a dotted name (tests, embedding applications)."""
        self._registered[path] = fn

    def resolve(self, path: str) -> ToolFn:
        if path in self._registered:
            return self._registered[path]
        if path in self._cache:
            return self._cache[path]
        if not path.startswith(self.allowed_prefixes):
            raise ToolResolutionError(
                f"tool {path!r} is outside the allowed modules "
                f"({', '.join(self.allowed_prefixes)}); add its module prefix to "
                "FORKLAB_TOOL_MODULES",
                tool=path,
            )
        module_name, _, attr = path.rpartition(".")
        try:
            fn = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ToolResolutionError(f"cannot import tool {path!r}: {exc}", tool=path) from None
        if not callable(fn):
            raise ToolResolutionError(f"tool {path!r} is not callable", tool=path)
        self._cache[path] = fn
        return fn  # type: ignore[no-any-return]
