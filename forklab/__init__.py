"""forklab: fork recorded agent-workflow runs, change one thing, see what became different.

``import forklab`` stays light (no Django, no engine until used): the code-first API
(``forklab.workflow``, ``forklab.tool``, ``forklab.step``, ``forklab.instrument``) is loaded
on first use from :mod:`forklab.sdk`.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # typed for checkers; loaded lazily at run time (``__getattr__``)
    from forklab.sdk import ToolFailed, instrument, step, tool, workflow

__version__ = "0.1.0"

_SDK = ("ToolFailed", "instrument", "step", "tool", "workflow")


def __getattr__(name: str) -> Any:
    if name in _SDK:
        from forklab import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'forklab' has no attribute {name!r}")


__all__ = ["ToolFailed", "__version__", "instrument", "step", "tool", "workflow"]
