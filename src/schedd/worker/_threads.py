"""Sync handlers in the thread pool, their completions handed back to the loop in bursts."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from schedd.worker._context import Context

SyncHandler = Callable[[Context, Any], Any]
_NOT_RUN = object()


class ThreadBridge:
    """Runs sync handlers in ``executor``; each gets an asyncio future on ``loop``.

    ``loop.run_in_executor`` wakes the loop (a write to its self-pipe) once per completion;
    here a pool thread wakes it only when no wake-up is pending yet, and the loop then settles
    every completion that arrived meanwhile. A handler whose attempt was cancelled while it
    waited for a thread is not run (as a cancelled ``run_in_executor`` future is not).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, executor: Executor) -> None:
        self._loop = loop
        self._executor = executor
        self._done: collections.deque[tuple[asyncio.Future[Any], Any, BaseException | None]]
        self._done = collections.deque()
        self._lock = threading.Lock()
        self._wake_pending = False

    def submit(self, fn: SyncHandler, ctx: Context, payload: Any) -> asyncio.Future[Any]:
        future = self._loop.create_future()
        self._executor.submit(self._run, future, fn, ctx, payload)
        return future

    def _run(
        self, future: asyncio.Future[Any], fn: SyncHandler, ctx: Context, payload: Any
    ) -> None:
        """In a pool thread."""
        if ctx.cancelled:
            self._done.append((future, _NOT_RUN, None))
        else:
            try:
                self._done.append((future, fn(ctx, payload), None))
            except BaseException as e:  # a handler's failure is its outcome, whatever it is
                self._done.append((future, None, e))
        with self._lock:
            if self._wake_pending:
                return
            self._wake_pending = True
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
            self._loop.call_soon_threadsafe(self._settle)

    def _settle(self) -> None:
        """On the loop: resolve every completion queued so far."""
        with self._lock:
            self._wake_pending = False  # before draining: a later completion wakes us again
        done = self._done
        while done:
            future, value, error = done.popleft()
            if future.done():  # cancelled meanwhile (deadline, cancel, shutdown)
                continue
            if value is _NOT_RUN:
                future.cancel()
            elif error is None:
                future.set_result(value)
            elif isinstance(error, StopIteration):  # futures refuse it: say what happened
                future.set_exception(RuntimeError(f"handler raised {error!r}"))
            else:
                future.set_exception(error)
