"""What one worker stream has to say to its node, batched: the outgoing WorkerBatch being
filled, the batches sealed before it, and the Started notices not yet written.

A :class:`~schedd.worker._connection.NodeConnection` owns one outbox per stream and decides
what goes in (only while the stream is live); the outbox decides when a batch is closed and
when the writer is woken:

- an item the node may be waiting for (credits when the stream's unused ones run low, a
  probe's answer, a revoke) leaves within ~2 ms (:data:`FLUSH_S`), so items that come in a
  burst leave together;
- results, Started notices, heartbeats and credits the node has plenty of may wait up to
  :data:`LINGER_S` for others: a result settled a few ms later is not what users see (the
  start of a fire is), and at 1k fires/s it is what turns one message, one settle
  transaction and one ack per two fires into one per ten;
- at 512 items the writer is woken at once; at :data:`MAX_ITEMS` items, or once results
  carry :data:`MAX_RESULT_BYTES` of output, the batch is sealed as a message of its own (the
  node's message limit holds however large a burst is);
- a Started notice whose Result leaves in the same batch is dropped (the Result says all it
  would).
"""

from __future__ import annotations

import asyncio
from collections import deque

from schedd.v1 import worker_pb2

#: The flush delay after an item the node may be waiting for, the longest any item waits
#: for others, and the item count that wakes the writer at once.
FLUSH_S = 0.002
LINGER_S = 0.010
_MAX_BATCH = 512
#: An outgoing WorkerBatch is sealed (and the next one started) at this many items, or once
#: its results carry this many bytes of output and errors: a node's default receive limit is
#: 4 MiB, and a burst's results pile up while a write is in flight.
MAX_ITEMS = 4096
MAX_RESULT_BYTES = 3 << 20


def _new_message() -> tuple[worker_pb2.WorkerMessage, worker_pb2.WorkerBatch]:
    """A WorkerMessage and its batch, filled in place (wrapping it later would copy it)."""
    msg = worker_pb2.WorkerMessage()
    batch = msg.batch
    batch.SetInParent()
    return msg, batch


class Outbox:
    """The outgoing batches of one stream, and the event that wakes its writer."""

    def __init__(self) -> None:
        #: Set when there is something to write (or the stream is closing).
        self.wake = asyncio.Event()
        self.message, self.batch = _new_message()
        self._items = 0
        self._bytes = 0
        self._sealed: deque[worker_pb2.WorkerMessage] = deque()
        # Started notices not yet written: execution id -> (token, started ms).
        self._started: dict[str, tuple[int, int]] = {}
        self._timer: asyncio.TimerHandle | None = None
        #: The armed timer is an early one (FLUSH_S): no later item can need it sooner.
        self._soon = False

    def add_started(self, execution_id: str, token: int, started_ms: int) -> None:
        """A Started notice, written with the next batch unless its Result goes with it."""
        self._started[execution_id] = (token, started_ms)
        self.added(soon=False)

    def added(self, *, soon: bool = True) -> None:
        """One item was put in :attr:`batch`: arm the flush (within :data:`FLUSH_S` if
        ``soon``, else :data:`LINGER_S`), or wake or seal at a size."""
        self._items += 1
        if self._items >= _MAX_BATCH:
            if self._items >= MAX_ITEMS:
                self.seal()
            self.wake.set()
            return
        timer = self._timer
        if timer is not None and (not soon or self._soon):
            return  # it goes at least as early as this item needs
        loop = asyncio.get_running_loop()
        at = loop.time() + (FLUSH_S if soon else LINGER_S)
        if timer is not None:
            if timer.when() <= at:
                self._soon = True
                return
            timer.cancel()
        self._timer = loop.call_at(at, self.wake.set)
        self._soon = soon

    def result_bytes(self, n: int) -> None:
        """The result just queued carries ``n`` bytes of output and error."""
        self._bytes += n
        if self._bytes >= MAX_RESULT_BYTES:
            self.seal()

    def seal(self) -> None:
        """Close the current batch as a message of its own; the writer sends it next."""
        msg = self._detach()
        if msg is not None:
            self._sealed.append(msg)
        self.wake.set()

    def take(self) -> worker_pb2.WorkerMessage | None:
        """The next message to write: sealed ones first, then the current batch (None when
        there is nothing to say)."""
        if self._sealed:
            return self._sealed.popleft()
        return self._detach()

    def reset(self) -> None:
        """Forget everything (the stream ended). The flush timer goes too: one that fired
        while the writer failed would otherwise stay set, and :meth:`added` arms a timer only
        when there is none, so the next stream's small batches would never go."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._soon = False
        self.message, self.batch = _new_message()
        self._items = self._bytes = 0
        self._sealed.clear()
        self._started.clear()

    def _detach(self) -> worker_pb2.WorkerMessage | None:
        """The current batch as a message (its Started notices added), replaced by a new one."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._soon = False
        batch = self.batch
        if not self._items and not batch.credits and not batch.prefetch_credits:
            return None
        started = self._started
        if started:
            if batch.results:
                for r in batch.results:
                    started.pop(r.execution_id, None)
            add = batch.started.add
            for eid, (token, ms) in started.items():
                add(execution_id=eid, fencing_token=token, started_ms=ms)
            started.clear()
        msg = self.message
        self.message, self.batch = _new_message()
        self._items = self._bytes = 0
        return msg
