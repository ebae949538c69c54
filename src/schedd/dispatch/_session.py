"""One worker stream on the node: what the worker said, its credits, and the outgoing batch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from schedd.dispatch._config import DispatchStats
from schedd.v1 import scheduler_pb2, worker_pb2

#: Put on the outgoing queue to end the stream.
END = None


class WorkerSession:
    """The node's view of one connected worker stream.

    Items are buffered into one :class:`~schedd.v1.worker_pb2.NodeBatch` and moved to
    :attr:`outgoing` as a NodeMessage when ``max_batch`` items are buffered or
    ``flush_interval_ms`` after the first one, whichever comes first.
    """

    def __init__(
        self,
        session_id: int,
        hello: worker_pb2.Hello,
        *,
        connected_ms: int,
        max_batch: int,
        flush_interval_ms: int,
        stats: DispatchStats,
    ) -> None:
        self.session_id = session_id
        self.hello = hello
        self.worker_id = hello.worker_id
        self.connected_ms = connected_ms
        #: Credits granted and not yet used by a dispatch.
        self.credits = 0
        #: Execution ids in flight on this stream.
        self.in_flight: set[str] = set()
        self.outgoing: asyncio.Queue[worker_pb2.NodeMessage | None] = asyncio.Queue()
        self.closed = False
        #: Set by the reader when the worker broke the protocol; the stream aborts with it.
        self.error: str | None = None
        self._max_batch = max(1, max_batch)
        self._flush_s = max(0, flush_interval_ms) / 1000.0
        self._stats = stats
        self._batch = worker_pb2.NodeBatch()
        self._items = 0
        self._timer: asyncio.TimerHandle | None = None

    def load(self) -> float:
        """In-flight executions relative to capacity (lower: less loaded)."""
        return len(self.in_flight) / max(1, self.hello.capacity)

    def send_dispatch(self, dispatch: worker_pb2.Dispatch) -> None:
        """Buffer a dispatch, using one credit (the caller checked there was one)."""
        self.credits -= 1
        self.in_flight.add(dispatch.execution_id)
        self._batch.dispatches.append(dispatch)
        self._stats.dispatches_sent += 1
        self._added()

    def send_cancel(self, execution_id: str, token: int, reason: str) -> None:
        self._batch.cancels.add(execution_id=execution_id, fencing_token=token, reason=reason)
        self._stats.cancels_sent += 1
        self._added()

    def send_acks(self, acks: list[worker_pb2.ResultAck]) -> None:
        for ack in acks:
            self._batch.acks.append(ack)
            self._stats.acks_sent += 1
            self._added()

    def _added(self) -> None:
        self._items += 1
        if self._items >= self._max_batch:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._flush_s, self.flush)

    def flush(self) -> None:
        """Move the buffered batch (if any) to :attr:`outgoing` now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._items or self.closed:
            return
        self.outgoing.put_nowait(worker_pb2.NodeMessage(batch=self._batch))
        self._stats.node_messages_sent += 1
        self._batch = worker_pb2.NodeBatch()
        self._items = 0

    def end(self, error: str | None = None) -> None:
        """Flush and then end the stream (with ``error``: abort it as INVALID_ARGUMENT)."""
        if self.closed:
            return
        if error is not None and self.error is None:
            self.error = error
        self.flush()
        self.closed = True
        self.outgoing.put_nowait(END)

    def status(self, node_id: str) -> scheduler_pb2.WorkerStatus:
        return scheduler_pb2.WorkerStatus(
            worker_id=self.worker_id,
            node_id=node_id,
            queues=list(self.hello.queues),
            handlers=list(self.hello.handlers),
            capacity=self.hello.capacity,
            in_flight=len(self.in_flight),
            connected_ms=self.connected_ms,
        )


def least_loaded(
    sessions: list[WorkerSession], eligible: Callable[[WorkerSession], bool]
) -> WorkerSession | None:
    """The eligible session with credits and the lowest load (ties: most credits)."""
    best: WorkerSession | None = None
    for s in sessions:
        if s.closed or s.credits <= 0 or not eligible(s):
            continue
        if best is None or (s.load(), -s.credits) < (best.load(), -best.credits):
            best = s
    return best
