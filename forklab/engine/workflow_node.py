"""The ``workflow`` node: a team's own agent code run as one node execution (SPEC §7).

The node calls its registered function (``module:function``, resolved through
``env.workflows``) with its read slice as keyword arguments and writes what it returns. While
it runs, a :class:`WorkflowScope` is current (a context variable), and the SDK recorder
(:mod:`forklab.sdk`) routes every call the code makes through it:

- a model call through an official vendor client becomes one :func:`~forklab.engine.asking.ask`
  — ``agent.requested`` / ``agent.responded`` with its call key, answered by the run's oracle
  (live, from a recording, as a change supplied, or refused) exactly as an agent node's turn;
- a ``@forklab.tool`` call becomes one ``oracle.tool_call`` — ``tool.called`` /
  ``tool.returned`` with its call key, under the side-effect guard like a model-chosen tool.

Call keys (:mod:`forklab.engine.calls`): ``openai:N`` / ``anthropic:N`` (that vendor's N-th
call) and ``tool:NAME#N`` (that tool's N-th call), counted per ``forklab.step`` group and
prefixed with it (``triage/openai:1``). A tool's own calls are grouped under its key
(``tool:refund#1/openai:1``).

Invariants:
- calls of one execution are made one at a time (a lock), in the order the code makes them,
  so the log does not depend on timing;
- anything the engine raises at a call (a refused side effect, a spent budget, a call that
  failed or diverged from the recording, cancellation) ends the node: it travels through the
  user's code as :class:`WorkflowAbort`, a ``BaseException`` that ``except Exception`` (the
  user's, or a vendor client's retry loop) does not catch, and is re-raised by the node;
- a model call the vendor answered with an error status (after forklab's retries), or
  whose recorded such failure a fork serves, is recorded as a failed call and reaches the
  code as the vendor's answer — its client raises the vendor's own exception, which the
  code may catch (:class:`VendorRefused`); left uncaught, it fails the node as that call's
  failure (``provider_error``);
- an exception the code raises fails the node (``workflow_error``) with its traceback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from forklab.engine.asking import ask
from forklab.engine.calls import workflow_call
from forklab.engine.canonical import fingerprint
from forklab.engine.context import NodeContext, write_memory
from forklab.engine.errors import ForklabError
from forklab.engine.events import CallFailed, ReflectionDiscarded, ToolCalled, ToolReturned
from forklab.engine.graph import AgentSpec, WorkflowNode
from forklab.engine.oracle import NodeFailure, Served, ToolUse, ensure_json, recorded_failure
from forklab.engine.providers import ChatRequest, Provider, lend_providers
from forklab.engine.tools import ToolContext

_AGENT = AgentSpec()  # ask() builds no request from it: a workflow call brings its own
_SCOPE: ContextVar[WorkflowScope | None] = ContextVar("forklab_workflow_scope", default=None)
_STEPS: ContextVar[tuple[str, ...]] = ContextVar("forklab_workflow_steps", default=())
_IN_TOOL: ContextVar[tuple[str, ...] | None] = ContextVar("forklab_workflow_tool", default=None)
_STEP_SOURCES: list[Callable[[], tuple[str, ...]]] = []


def add_step_source(source: Callable[[], tuple[str, ...]]) -> None:
    """Also group calls by what ``source`` says the code is inside (a framework's current
    node: ``forklab.sdk.frameworks``), below the ``step`` groups. ``source`` returns step
    names (identifiers) or ``()``; it must be cheap and never raise. Added once each."""
    if source not in _STEP_SOURCES:
        _STEP_SOURCES.append(source)


def current_steps() -> tuple[str, ...]:
    """The groups a call made here is keyed under: ``step`` blocks, then step sources; inside
    a ``@forklab.tool`` call, that call's key, then the ``step`` blocks opened inside it."""
    inside = _IN_TOOL.get()
    if inside is not None:
        return (*inside, *_STEPS.get())
    steps = _STEPS.get()
    for source in _STEP_SOURCES:
        steps = (*steps, *source())
    return steps


class WorkflowAbort(BaseException):
    """The engine ended the node at a call; carries why (``cause``) through user code."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


REFUSED_HEADER = "x-forklab-call"
"""The header of an error answer handed to a client: the failed call's key."""


class VendorRefused(Exception):
    """A model call the vendor answered with an error status (after the retries forklab
    makes), or whose recorded such failure a fork serves: recorded as a failed call, and
    handed to the code as the vendor's answer, so its client raises the vendor's own
    exception (``openai.RateLimitError``, ``anthropic.BadRequestError``) — which the code
    may catch. ``error`` is the call's recorded error (``status``, ``message``, …)."""

    def __init__(self, error: dict[str, Any], key: str) -> None:
        super().__init__(str(error.get("message")))
        self.error = error
        self.key = key  # the call's key


def vendor_refusal(failure: NodeFailure) -> bool:
    """Whether ``failure`` is the vendor's error answer (an HTTP status of 400 or more),
    which the code's client should raise, rather than something the engine refused."""
    status = failure.error.get("status")
    return (failure.error.get("type") == "provider_error" and isinstance(status, int)
            and status >= 400)


class ToolFailed(Exception):
    """A ``@forklab.tool`` call whose recorded failure is served again in a fork: the code
    sees it raise, as it did when recorded (``type``: the recorded exception's class name)."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type


def current_scope() -> WorkflowScope | None:
    """The workflow execution this code runs in, or None outside any workflow."""
    return _SCOPE.get()


@contextmanager
def step(name: str) -> Iterator[None]:
    """Group the calls made inside under ``name`` (their keys become ``name/openai:1``)."""
    if not name or not name.replace("_", "a").replace("-", "a").isalnum() or name[0].isdigit():
        raise ValueError(f"step name {name!r} must be an identifier (letters, digits, _ or -, "
                         "not starting with a digit): it is part of call keys")
    token = _STEPS.set((*_STEPS.get(), name))
    try:
        yield
    finally:
        _STEPS.reset(token)


class WorkflowScope:
    """One execution of a workflow node: numbers its calls and asks the run's oracle."""

    def __init__(self, ctx: NodeContext, node: WorkflowNode) -> None:
        self.ctx = ctx
        self.node = node
        self.untrusted = False
        self.abort: BaseException | None = None
        self._counts: dict[tuple[tuple[str, ...], str], int] = {}
        self._lock = threading.RLock()  # one call at a time
        self._counting = threading.Lock()
        # the errors of the calls whose error answer was handed to the code's client, by
        # call key: an exception raised from one and left uncaught fails the node as it
        self._refusals: dict[str, dict[str, Any]] = {}

    def _key(self, part: str, sep: str) -> str:
        # its own lock, never the call lock: the event loop takes keys while a worker
        # thread holding the call lock waits on that loop for a live request
        with self._counting:
            steps = current_steps()
            n = self._counts.get((steps, part), 0) + 1
            self._counts[(steps, part)] = n
            return workflow_call(steps, f"{part}{sep}{n}")

    def model_key(self, vendor: str) -> str:
        """The key the next ``vendor`` call made here gets. Async code takes it on the event
        loop, before its call waits on a thread: tasks reach that point in the loop's order,
        so concurrent calls (``asyncio.gather``) get the same keys in every execution."""
        return self._key(vendor, ":")

    def tool_key(self, name: str) -> str:
        """The key the next call of tool ``name`` made here gets (see :meth:`model_key`)."""
        return self._key(f"tool:{name}", "#")

    def _aborted(self, exc: BaseException) -> WorkflowAbort:
        if isinstance(exc, WorkflowAbort):
            return exc
        self.abort = self.abort or exc
        return WorkflowAbort(self.abort)

    @contextmanager
    def _serial(self) -> Iterator[None]:
        """One call at a time — except a call made inside a tool's call: that is part of the
        tool's call (which holds the lock), and may reach here on another thread (an async
        tool's body runs on the event loop, its calls on worker threads)."""
        if _IN_TOOL.get() is not None:
            yield
            return
        with self._lock:
            yield

    def fail(self, code: str, message: str) -> WorkflowAbort:
        """End the node with ``code`` (something forklab cannot record, e.g. a request it
        cannot read): the exception to raise through the user's code."""
        return self._aborted(NodeFailure(code, message))

    def _check(self) -> None:
        if self.abort is not None:  # a call after the node was ended (swallowed): refused
            raise WorkflowAbort(self.abort)

    def model_call(self, vendor: str, request: ChatRequest, lent: Provider,
                   key: str | None = None) -> Served:
        """One model call (key ``<steps>/<vendor>:N``, or ``key`` taken before), answered by
        the run's oracle; ``lent`` answers it live (the user's own client) unless a change
        names another provider. Raises :class:`WorkflowAbort` when the engine ends the node."""
        self._check()
        key = key or self.model_key(vendor)
        with self._serial():
            try:
                with lend_providers({request.provider: lent}):
                    return ask(self.ctx, _AGENT, list(request.messages),
                               request=self._settled(request), call=key)
            except NodeFailure as failure:
                if vendor_refusal(failure):  # recorded (ask did): the code's to handle
                    raise VendorRefused(failure.error, key) from None
                raise self._aborted(failure) from None
            except BaseException as exc:
                raise self._aborted(exc) from None

    def refused(self, refusal: VendorRefused) -> str:
        """Note that the error answer of call ``refusal.key`` goes to the code, and return
        the value of the :data:`REFUSED_HEADER` it must carry: the client's exception built
        from it then fails the node as that call's failure if the code does not catch it."""
        self._refusals[refusal.key] = refusal.error
        return refusal.key

    def refusal(self, exc: BaseException) -> NodeFailure | None:
        """The failure of the call whose error answer ``exc`` was raised from (the vendor
        clients keep it as ``exc.response``, with its :data:`REFUSED_HEADER`), or None."""
        headers = getattr(getattr(exc, "response", None), "headers", None)
        key = headers.get(REFUSED_HEADER) if headers is not None else None
        error = self._refusals.get(key) if isinstance(key, str) else None
        return None if error is None else recorded_failure(error, label="live")

    def _settled(self, request: ChatRequest) -> ChatRequest:
        """``request`` with the node's settings for every call (a node-wide change)."""
        node = self.node
        update = {name: getattr(node, name) for name in (
            "provider", "model", "system_prompt", "temperature") if getattr(node, name) is not None}
        return dataclasses.replace(request, **update) if update else request

    def tool_call(self, name: str, fn: str, *, effect: str, trusted: bool,
                  args: dict[str, Any], invoke: Callable[[dict[str, Any]], Any],
                  key: str | None = None) -> Any:
        """One ``@forklab.tool`` call (key ``<steps>/tool:NAME#N``) through the oracle: its
        JSON result (what a fork serves is the recorded JSON, so the code sees the same).

        The tool's own exception reaches the code unchanged; a recorded failure served again
        raises :class:`ToolFailed`; anything the engine refuses ends the node."""
        self._check()
        try:
            args = ensure_json(args, f"the arguments of tool {name!r}")
        except NodeFailure as failure:
            raise self._aborted(failure) from None
        key = key or self.tool_key(name)
        with self._serial():
            raised: list[Exception] = []

            def run(arguments: dict[str, Any], _ctx: ToolContext) -> Any:
                tool, steps = _IN_TOOL.set(tuple(key.split("/"))), _STEPS.set(())
                try:
                    return invoke(arguments)
                except Exception as exc:
                    raised.append(exc)
                    raise
                finally:
                    _STEPS.reset(steps)
                    _IN_TOOL.reset(tool)

            return self._tool(key, ToolUse(
                call=key, call_id=key, name=name, fn=fn, effect=effect, trusted=trusted,
                args=args, args_hash=fingerprint(args), invoke=run), raised)

    def _tool(self, key: str, use: ToolUse, raised: list[Exception]) -> Any:
        ctx = self.ctx
        try:
            ctx.emit(ToolCalled, tool=use.name, effect=use.effect,
                     args=ctx.env.redactor.redact(use.args), args_hash=use.args_hash,
                     call=key, call_id=key, trusted=use.trusted)
            ctx.check_cancel()
            ctx.before_call()
            tool_ctx = ToolContext(run_id=ctx.run_id, node=ctx.call.node,
                                   occurrence=ctx.call.occurrence,
                                   reflections=ctx.env.reflections,
                                   capture_reflections=ctx.oracle.captures_reflections)
            try:
                result, label = ctx.oracle.tool_call(ctx.call, use, tool_ctx)
            finally:
                for captured in tool_ctx.captured:
                    ctx.emit(ReflectionDiscarded, **captured)
        except NodeFailure as failure:
            ctx.emit(CallFailed, kind="tool", role=None, index=None, model=None,
                     label=failure.label, error=failure.error, request_hash=use.args_hash,
                     call=key)
            if raised:
                raise raised[0] from None
            if failure.label == "reused" and failure.error["type"] != "prefix_diverged":
                # a recorded failure served again (a diverged prefix call is the engine's
                # refusal, which ends the node like any other)
                raise ToolFailed(failure.error["type"], failure.error["message"]) from None
            raise self._aborted(failure) from None
        except BaseException as exc:
            raise self._aborted(exc) from None
        ctx.emit(ToolReturned, result=ctx.env.redactor.redact(result), label=label, call=key)
        self.untrusted = self.untrusted or not use.trusted
        return result


def run_workflow_node(ctx: NodeContext, node: WorkflowNode) -> str | None:
    """Execute ``node``: call its function under a :class:`WorkflowScope`, write its result."""
    try:
        fn = ctx.env.workflows.resolve(node.fn)
    except ForklabError as exc:
        raise NodeFailure(exc.code, exc.message) from None
    scope = WorkflowScope(ctx, node)
    scope_token, steps_token = _SCOPE.set(scope), _STEPS.set(())
    try:
        result = _call(fn, dict(ctx.call.reads))
    except WorkflowAbort as abort:
        raise abort.cause from None
    except Exception as exc:
        if scope.abort is not None:  # the code caught the abort's exception and raised
            raise scope.abort from None
        refused = scope.refusal(exc)
        if refused is not None:  # the vendor's error answer, not caught: that call's failure
            raise refused from None
        raise NodeFailure("workflow_error", _described(node, exc)) from None
    finally:
        _SCOPE.reset(scope_token)
        _STEPS.reset(steps_token)
    if scope.abort is not None:  # the code swallowed it (``except BaseException``)
        raise scope.abort
    value = ensure_json(result, f"the return value of workflow {node.fn!r}")
    write_memory(ctx, node.writes[0], value, ctx.reads_tainted(untrusted=scope.untrusted))
    return None


def _call(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Call the workflow with an event loop of its own, closed after it, as ``asyncio.run``
    gives a coroutine one: a framework's ``run_sync`` (PydanticAI, the OpenAI Agents SDK)
    then never finds a loop an earlier execution in this thread left behind, shut down."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        result = fn(**kwargs)
        if inspect.iscoroutine(result):
            result = loop.run_until_complete(result)
        return result
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _described(node: WorkflowNode, exc: Exception) -> str:
    """The error a failed workflow node records: what raised, and the traceback of the
    user's code (the engine's own frames above it left out)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    frames = traceback.format_exception(type(exc), exc, tb)
    return (f"workflow {node.fn!r} raised {type(exc).__name__}: {exc}\n\n"
            + "".join(frames).rstrip())


__all__ = ["REFUSED_HEADER", "ToolFailed", "VendorRefused", "WorkflowAbort", "WorkflowScope", "add_step_source",
           "current_scope", "current_steps", "run_workflow_node", "step", "vendor_refusal"]
