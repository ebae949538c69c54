"""The executor of registered Python handlers (``async def`` or plain ``def`` functions)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from schedd.v1 import worker_pb2
from schedd.worker._context import Context
from schedd.worker._eager import EagerTask
from schedd.worker._executor import Outcome, Runtime, error_text, settle, succeeded

Handler = Callable[[Context, Any], Any]


class HandlerExecutor:
    """Runs one registered handler: an :class:`~schedd.worker._executor.Executor`.

    An async handler's first step runs at once (:class:`~schedd.worker._eager.EagerTask`);
    one that returns or raises without suspending is settled on the spot (SUCCEEDED with its
    JSON-encoded value, FAILED ``"Class: message"``, FAILED_PERMANENT for PermanentError,
    CANCELLED for CancelledError), so the worker arms no timer for it. A sync handler runs in
    the worker's thread pool.
    """

    __slots__ = ("fn", "is_async")

    def __init__(self, fn: Handler) -> None:
        self.fn = fn
        #: Decided once, at registration, not per attempt.
        self.is_async = inspect.iscoroutinefunction(fn)

    def begin(self, ctx: Context, payload: Any, runtime: Runtime) -> Outcome | asyncio.Future[Any]:
        if not self.is_async:
            return runtime.threads.submit(self.fn, ctx, payload)
        try:
            coro = self.fn(ctx, payload)
        except Exception as e:  # e.g. a signature that does not take (ctx, payload)
            return Outcome(worker_pb2.OUTCOME_FAILED, error=error_text(e))
        task = EagerTask(coro, runtime.loop)
        if task.returned_eagerly:  # the common case, without settle()'s four future calls
            return succeeded(task.eager_value)
        return settle(task) if task.done() else task
