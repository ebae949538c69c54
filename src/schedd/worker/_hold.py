"""Executions a node sent ahead of their instant, held until it comes.

A node may send an execution up to a couple of seconds early (``Dispatch.start_at_ms``), using
one of the worker's prefetch credits. The worker keeps it here and starts it at that instant,
so a burst of fires due at the same second starts from the worker's own timer: no node, no
stream and no serialization between the instant and the handler.

Rules (the worker enforces them, :class:`~schedd.worker.Worker` calls in):

* A held execution lives only as long as the stream it came on: when that stream ends, it is
  dropped unstarted (the node sees the stream end and hands it out again with a new token).
* A Cancel from the node, a newer dispatch of the same execution, or a worker shutdown takes
  it out before it starts (the worker answers CANCELLED, which the node hands out again or
  ends).
* When its instant comes it starts as soon as fewer than ``capacity`` executions run.

Start instants are on the node's clock: each stream measures the node's clock against the
worker's at its Welcome (:attr:`~schedd.worker._connection.NodeConnection.clock_offset_ms`),
so a worker whose clock is off still starts at the node's instant.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from schedd.v1 import worker_pb2
from schedd.worker._connection import NodeConnection
from schedd.worker._execution import Execution

#: At most this many held executions start on one event-loop pass; the rest on the next pass
#: (the stream reader, timers and other callbacks get their turn in between).
START_SLICE = 1024
#: While a burst of held executions is starting, the stream writers wait (``starting``) for at
#: most this long: the results and their ledger writes cost more than the starts, and a start
#: is what is late, a result is not.
MAX_RESULT_DEFER_S = 1.0


@dataclass(slots=True, eq=False)
class Held:
    conn: NodeConnection
    dispatch: worker_pb2.Dispatch
    local_start_ms: int
    #: The attempt, built (and its payload decoded) when it arrived, so its instant only
    #: runs the handler.
    ex: Execution | None = None
    #: Its execution id (set by HoldQueue.add; read often, a protobuf field read is not free).
    eid: str = ""


class HoldQueue:
    """Held executions by id, grouped by start instant (a burst shares one: its instant is
    one heap entry and one list, and coming due is a list append, not a heap pop each), a
    heap of the instants, one loop timer for the earliest.

    ``start(held)`` is called for each that is due, oldest first, at most ``START_SLICE`` per
    loop pass and only while ``has_room()``, all of a pass inside one ``batch()`` context;
    call :meth:`kick` when room frees up.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        now_ms: Callable[[], int],
        has_room: Callable[[], bool],
        start: Callable[[Held], None],
        batch: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
    ) -> None:
        self._loop = loop
        self._batch = batch
        self._now_ms = now_ms
        self._has_room = has_room
        self._start = start
        self.by_id: dict[str, Held] = {}
        self._heap: list[int] = []
        self._at: dict[int, list[Held]] = {}
        self._ready: deque[Held] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0
        self._kick_queued = False
        #: True while due executions are being started (a start that frees a slot at once
        #: need not kick: the loop goes on).
        self.draining = False
        #: Clear while a burst is starting: due executions left and room to start them.
        self.quiet = asyncio.Event()
        self.quiet.set()

    def __len__(self) -> int:
        return len(self.by_id)

    def add(self, held: Held) -> Held | None:
        """Hold ``held``; returns the entry it replaced (the same execution, held before)."""
        eid = held.eid = held.dispatch.execution_id
        old = self.by_id.get(eid)
        self.by_id[eid] = held
        at = held.local_start_ms
        bucket = self._at.get(at)
        if bucket is None:
            self._at[at] = [held]
            heapq.heappush(self._heap, at)
            if self._timer is None or at < self._timer_at:
                self._arm(at)
        else:
            bucket.append(held)
        return old

    def take(self, execution_id: str) -> Held | None:
        """Remove a held execution (cancelled, replaced, its stream gone); None if not held."""
        return self.by_id.pop(execution_id, None)

    def drop_stream(self, conn: NodeConnection) -> list[Held]:
        """Remove and return every execution held for ``conn``."""
        gone = [h for h in self.by_id.values() if h.conn is conn]
        for h in gone:
            del self.by_id[h.eid]
        return gone

    def take_all(self) -> list[Held]:
        gone = list(self.by_id.values())
        self.by_id.clear()
        return gone

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._heap.clear()
        self._at.clear()
        self._ready.clear()
        self.by_id.clear()
        self.quiet.set()

    def kick(self) -> None:
        """Room may have freed up: start waiting due executions (on the next loop pass)."""
        if self._ready and not self._kick_queued:
            self._kick_queued = True
            self._loop.call_soon(self._drain)

    def _arm(self, local_ms: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = local_ms
        delay = max(0.0, (local_ms - self._now_ms()) / 1000.0)
        self._timer = self._loop.call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        heap = self._heap
        now = self._now_ms()
        while heap and heap[0] <= now:
            # Cancelled or replaced ones stay in their list; _drain skips them.
            self._ready.extend(self._at.pop(heapq.heappop(heap)))
        if heap:
            self._arm(heap[0])
        self._drain()

    def _drain(self) -> None:
        self._kick_queued = False
        if self.draining:  # a start finished at once and kicked us again: the loop goes on
            return
        self.draining = True
        budget = START_SLICE
        try:
            ready, by_id, start, has_room = self._ready, self.by_id, self._start, self._has_room
            with self._batch():
                while ready and budget and has_room():
                    held = ready.popleft()
                    if by_id.get(held.eid) is not held:
                        continue  # cancelled or replaced meanwhile
                    del by_id[held.eid]
                    budget -= 1
                    start(held)
        finally:
            self.draining = False
        if ready and not budget:
            self._kick_queued = True
            self._loop.call_soon(self._drain)
            self.quiet.clear()
        else:
            self.quiet.set()

    async def starting(self) -> None:
        """Wait while a burst of held executions is starting (at most MAX_RESULT_DEFER_S)."""
        if not self.quiet.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.quiet.wait(), MAX_RESULT_DEFER_S)
