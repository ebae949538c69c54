"""Running one attempt: the handler call, its heartbeats, its deadline and its outcome."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from schedd._clock import Clock
from schedd.v1 import worker_pb2
from schedd.worker._connection import NodeConnection
from schedd.worker._context import Context, PermanentError, decode_payload, encode_value

log = logging.getLogger(__name__)

Handler = Callable[[Context, Any], Any]
#: How long a cancelled async handler gets to unwind before its outcome is reported anyway.
_CANCEL_GRACE_S = 5.0


@dataclass
class Outcome:
    code: int
    output: bytes = b""
    error: str = ""


@dataclass
class Execution:
    """An attempt this worker is running; ``conn`` is where its messages go (it may move)."""

    ctx: Context
    conn: NodeConnection
    task: asyncio.Task[None] | None = None
    started_ms: int = 0

    @property
    def dispatch(self) -> worker_pb2.Dispatch:
        return self.ctx._dispatch

    def beat(self) -> None:
        """Queue a heartbeat (with a pending checkpoint) on the current stream."""
        d = self.dispatch
        self.conn.add_heartbeat(d.execution_id, d.fencing_token, self.ctx.take_checkpoint())


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _settle(task: asyncio.Future[Any]) -> Outcome:
    """The outcome of a finished handler task."""
    if task.cancelled():
        return Outcome(worker_pb2.OUTCOME_CANCELLED, error="handler was cancelled")
    exc = task.exception()
    if isinstance(exc, PermanentError):
        return Outcome(worker_pb2.OUTCOME_FAILED_PERMANENT, error=_error_text(exc))
    if exc is not None:
        return Outcome(worker_pb2.OUTCOME_FAILED, error=_error_text(exc))
    try:
        return Outcome(worker_pb2.OUTCOME_SUCCEEDED, output=encode_value(task.result()))
    except (TypeError, ValueError) as e:
        return Outcome(worker_pb2.OUTCOME_FAILED, error=f"output is not JSON-encodable: {e}")


async def invoke(
    handler: Handler | None, ex: Execution, executor: Executor, clock: Clock
) -> Outcome:
    """Run the handler under the attempt's deadline and cancellation.

    Contract: returns SUCCEEDED with the JSON-encoded return value; FAILED with
    ``"Class: message"`` for an exception; FAILED_PERMANENT for PermanentError or an unknown
    handler; TIMED_OUT when ``deadline_ms`` passes; CANCELLED when the context is cancelled.
    A sync handler runs in ``executor``; when it times out or is cancelled its thread cannot be
    stopped: it sees ``ctx.cancelled`` and its return value is discarded.
    """
    d = ex.dispatch
    if handler is None:
        what = d.handler or "(http/shell target)"
        return Outcome(
            worker_pb2.OUTCOME_FAILED_PERMANENT, error=f"no handler named {what} on this worker"
        )
    timeout: float | None = None
    if d.deadline_ms:
        timeout = (d.deadline_ms - clock.now_ms()) / 1000.0
        if timeout <= 0:
            return Outcome(worker_pb2.OUTCOME_TIMED_OUT, error="deadline passed before start")
    payload = decode_payload(d.payload)
    inner: asyncio.Future[Any]
    if inspect.iscoroutinefunction(handler):
        inner = asyncio.ensure_future(handler(ex.ctx, payload))
    else:
        inner = asyncio.get_running_loop().run_in_executor(executor, handler, ex.ctx, payload)
    cancelled = asyncio.ensure_future(ex.ctx.wait_cancelled())
    try:
        done, _ = await asyncio.wait(
            {inner, cancelled}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        cancelled.cancel()
    if inner in done:
        return _settle(inner)
    if cancelled in done:
        outcome = Outcome(worker_pb2.OUTCOME_CANCELLED, error=ex.ctx.cancel_reason)
    else:
        ex.ctx.cancel("deadline passed")
        outcome = Outcome(worker_pb2.OUTCOME_TIMED_OUT, error="deadline passed")
    inner.cancel()
    await asyncio.wait({inner}, timeout=_CANCEL_GRACE_S)
    return outcome


class HeartbeatTimer:
    """Heartbeats ``ex`` every ``interval_s()`` seconds until stopped (a timer, not a task:
    executions are many and tasks are not free)."""

    def __init__(self, ex: Execution, interval_s: Callable[[], float]) -> None:
        self._ex = ex
        self._interval_s = interval_s
        self._loop = asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = None
        self._schedule()

    def _schedule(self) -> None:
        self._handle = self._loop.call_later(max(0.05, self._interval_s()), self._tick)

    def _tick(self) -> None:
        self._ex.beat()
        self._schedule()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
