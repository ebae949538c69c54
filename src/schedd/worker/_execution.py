"""Running one attempt: its executor's start, deadline, cancellation, heartbeats and outcome.

The cost of an attempt is paid only as far as it goes. An executor that decides at once (an
async handler that returns without suspending: its first step runs eagerly) is settled on the
spot: no deadline timer, no heartbeat timer, no cancel waiter, nothing scheduled on the loop.
Only an attempt that suspends (every sync handler does: it runs in the thread pool) is
:meth:`Execution.watch`-ed, which arms its deadline, heartbeats and cancellation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from schedd.v1 import worker_pb2
from schedd.worker._connection import NodeConnection
from schedd.worker._context import Context, decode_payload
from schedd.worker._executor import Executor, Outcome, Runtime, no_executor_error, settle
from schedd.worker._timers import DeadlineQueue

#: ``Execution.payload`` before the payload was decoded (it is decoded ahead for held ones).
UNDECODED: Any = object()
#: How long a cancelled attempt gets to unwind before its outcome is reported anyway.
_CANCEL_GRACE_S = 5.0


def begin(
    executor: Executor | None, ex: Execution, now_ms: int, runtime: Runtime
) -> Outcome | asyncio.Future[Any]:
    """Start ``ex`` on ``executor``: its Outcome if it is already decided, else the future
    still running it (see :class:`~schedd.worker._executor.Executor`).

    Contract: FAILED_PERMANENT, naming the handler or the target's kind, when there is no
    executor (nothing is called); TIMED_OUT when ``deadline_ms`` passed before the start;
    otherwise whatever the executor decides.
    """
    d = ex.dispatch
    if executor is None:
        return Outcome(worker_pb2.OUTCOME_FAILED_PERMANENT, error=no_executor_error(d))
    if d.deadline_ms and d.deadline_ms <= now_ms:
        return Outcome(worker_pb2.OUTCOME_TIMED_OUT, error="deadline passed before start")
    payload = ex.payload
    if payload is UNDECODED:
        payload = decode_payload(d.payload)
    ex.payload = None  # handed to the executor: not kept alive by the attempt
    return executor.begin(ex.ctx, payload, runtime)


class Execution:
    """An attempt this worker is running; ``conn`` is where its messages go (it may move).

    ``report`` is called exactly once with the attempt's Outcome, unless :meth:`abort` comes
    first. An attempt whose handler suspended is :meth:`watch`-ed: from then on

    * its deadline (``deadline_ms``) cancels the handler and decides TIMED_OUT;
    * ``ctx.cancel(reason)`` (a Cancel from the node, a shutdown, a newer attempt) cancels the
      handler and decides CANCELLED with that reason;
    * either way the handler gets ``_CANCEL_GRACE_S`` to unwind; the decided outcome is
      reported when it has (whatever it returned), or when the grace runs out;
    * ``finished`` resolves after the report.

    Heartbeats are the worker's (one ticker beats every watched attempt).
    """

    __slots__ = (
        "_deadlines",
        "_grace",
        "_report",
        "_reported",
        "conn",
        "ctx",
        "finished",
        "future",
        "held",
        "outcome",
        "payload",
        "started_ms",
    )

    def __init__(
        self, ctx: Context, conn: NodeConnection, report: Callable[[Execution, Outcome], None]
    ) -> None:
        self.ctx = ctx
        self.conn = conn
        self.started_ms = 0
        #: Sent ahead of its instant: it holds a prefetch slot, not a capacity credit.
        self.held = False
        #: The decoded payload, when decoded ahead of the start (else UNDECODED).
        self.payload: Any = UNDECODED
        #: The running handler (set by watch()).
        self.future: asyncio.Future[Any] | None = None
        #: Resolves once the result is reported (or the attempt aborted); set while it is
        #: in the worker's running table.
        self.finished: asyncio.Future[None] | None = None
        #: Decided ahead of the handler's end by a deadline or a cancel.
        self.outcome: Outcome | None = None
        self._report = report
        self._reported = False
        #: Where its deadline waits (while it does).
        self._deadlines: DeadlineQueue | None = None
        self._grace: asyncio.TimerHandle | None = None

    @property
    def dispatch(self) -> worker_pb2.Dispatch:
        return self.ctx._dispatch

    @property
    def done(self) -> bool:
        """True once reported or aborted."""
        return self._reported

    def beat(self) -> None:
        """Queue a heartbeat (with a pending checkpoint) on the current stream."""
        d = self.dispatch
        self.conn.add_heartbeat(d.execution_id, d.fencing_token, self.ctx.take_checkpoint())

    def watch(self, future: asyncio.Future[Any], now_ms: int, deadlines: DeadlineQueue) -> None:
        """Arm the deadline and cancellation of a handler that is still running."""
        self.future = future
        deadline_ms = self.dispatch.deadline_ms
        if deadline_ms:
            self._deadlines = deadlines
            deadlines.add(future.get_loop().time() + (deadline_ms - now_ms) / 1000.0, self)
        self.ctx._on_cancel = self._on_cancel
        future.add_done_callback(self._on_done)
        if self.ctx.cancelled:  # the handler's first step saw a cancel coming in
            self._on_cancel()

    def finish(self, outcome: Outcome) -> None:
        """Report ``outcome`` now (once), disarming every timer."""
        if self._reported:
            return
        self._reported = True
        self._disarm()
        self._report(self, outcome)

    def abort(self) -> None:
        """Drop the attempt without a report: cancel the handler, disarm the timers."""
        if self._reported:
            return
        self._reported = True
        self._disarm()
        if self.future is not None:
            self.future.cancel()
        if self.finished is not None and not self.finished.done():
            self.finished.set_result(None)

    def _disarm(self) -> None:
        # Also breaks the ex -> ctx -> ex.beat cycle, so an attempt is freed by refcount
        # when it ends, not by the cyclic GC (which 100k live cycles make slow and frequent).
        self.ctx._on_cancel = None
        self.ctx._beat = None
        if self._deadlines is not None:
            self._deadlines.forget()
            self._deadlines = None
        if self._grace is not None:
            self._grace.cancel()

    def _on_done(self, future: asyncio.Future[Any]) -> None:
        self.finish(self.outcome if self.outcome is not None else settle(future))

    def expire(self) -> None:
        """The deadline passed (called by the DeadlineQueue)."""
        self._deadlines = None
        if self.outcome is None and self.future is not None and not self.future.done():
            self.outcome = Outcome(worker_pb2.OUTCOME_TIMED_OUT, error="deadline passed")
            self.ctx.cancel("deadline passed")
            self._interrupt()

    def withdraw_cancel(self) -> None:
        """A node's cancel proved wrong: the execution was handed over and its new owner
        adopted this attempt. A handler that still finishes its work then reports what it
        did, not CANCELLED (which would have the new owner run it again); one that gave up
        reports CANCELLED by itself, and the grace timer already armed still bounds it."""
        if self.outcome is not None and self.outcome.code == worker_pb2.OUTCOME_CANCELLED:
            self.outcome = None

    def _on_cancel(self) -> None:
        if self.future is None or self.future.done() or self._reported:
            return  # finished meanwhile: its own outcome stands
        if self.outcome is None:
            self.outcome = Outcome(worker_pb2.OUTCOME_CANCELLED, error=self.ctx.cancel_reason)
        self._interrupt()

    def _interrupt(self) -> None:
        assert self.future is not None
        self.future.cancel()
        if self._grace is None and not self._reported:
            outcome = self.outcome
            assert outcome is not None
            self._grace = self.future.get_loop().call_later(_CANCEL_GRACE_S, self.finish, outcome)
