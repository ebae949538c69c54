"""The worker's two clocks for running attempts: deadlines and heartbeats, one loop timer each.

A loop timer per attempt (``call_at``: a TimerHandle, a push on the loop's heap, a cancel)
costs more than a no-op handler; a worker running thousands of attempts at once would keep
two per attempt. Instead all deadlines share one heap and one timer for the earliest, and all
heartbeats share one periodic tick.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Iterable
from typing import Protocol

#: The shortest heartbeat period, whatever a node asks for.
MIN_BEAT_INTERVAL_S = 0.05
#: Rebuild the heap when more than this many of its entries belong to finished attempts
#: (and they are the majority): a finished attempt's entry stays until then, not removed.
_COMPACT_AFTER = 1024


class Expiring(Protocol):
    @property
    def done(self) -> bool: ...

    def expire(self) -> None: ...


class DeadlineQueue:
    """Calls ``item.expire()`` at its deadline (loop time), unless the item is ``done`` by then.

    ``add`` is a heap push; the one loop timer is re-armed only when the earliest deadline
    changes. Call :meth:`forget` when an added item finishes early, so the heap can be
    compacted.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, Expiring]] = []
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._finished = 0

    def __len__(self) -> int:
        return len(self._heap) - self._finished

    def add(self, when: float, item: Expiring) -> None:
        heapq.heappush(self._heap, (when, next(self._seq), item))
        if self._timer is None or when < self._timer_at:
            self._arm(when)

    def forget(self) -> None:
        """An added item finished before its deadline."""
        self._finished += 1
        if self._finished > _COMPACT_AFTER and self._finished * 2 > len(self._heap):
            self._heap = [e for e in self._heap if not e[2].done]
            heapq.heapify(self._heap)
            self._finished = 0

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._heap.clear()
        self._finished = 0

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer = None
        heap = self._heap
        now = self._loop.time()
        while heap and heap[0][0] <= now:
            item = heapq.heappop(heap)[2]
            if item.done:
                self._finished = max(0, self._finished - 1)
            else:
                item.expire()
        if heap:
            self._arm(heap[0][0])


class HeartbeatTicker:
    """Every ``interval_s()`` seconds, heartbeats each attempt ``running()`` yields.

    Runs only while there is something to beat: :meth:`wake` starts it (cheap when it already
    runs), and a tick that finds nothing stops it. An attempt is beaten first at the tick after
    it was watched (within one interval), then every interval, like a timer of its own.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        running: Callable[[], Iterable[Callable[[], None]]],
        interval_s: Callable[[], float],
    ) -> None:
        self._loop = loop
        self._running = running
        self._interval_s = interval_s
        self._timer: asyncio.TimerHandle | None = None

    def wake(self) -> None:
        if self._timer is None:
            self._schedule()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self) -> None:
        delay = max(MIN_BEAT_INTERVAL_S, self._interval_s())
        self._timer = self._loop.call_later(delay, self._tick)

    def _tick(self) -> None:
        self._timer = None
        beats = list(self._running())
        for beat in beats:
            beat()
        if beats:
            self._schedule()
