"""The hierarchical timing wheel: O(1) add and cancel, a queue of non-empty buckets only."""

from __future__ import annotations

import heapq
from operator import attrgetter
from typing import Generic, TypeVar

from schedd.timerwheel._handle import SEQ_BITS, TimerHandle, _Bucket

T = TypeVar("T")

_new_handle = object.__new__
_by_key = attrgetter("_key")


class _Level:
    """One wheel of the hierarchy: ``size`` slots of ``tick_ms`` each.

    ``limit_ms`` is the first time this level cannot hold (its window is
    ``[now // tick_ms * tick_ms, limit_ms)``). A slot's bucket is due at ``start + offset_ms``:
    the last millisecond of its range on the bottom level (everything in it is then expired),
    the first millisecond on an overflow level (when its timers must move down).
    """

    __slots__ = ("interval_ms", "limit_ms", "offset_ms", "slots", "tick_ms")

    def __init__(self, tick_ms: int, size: int, now_ms: int, first_uid: int, bottom: bool) -> None:
        self.tick_ms = tick_ms
        self.interval_ms = tick_ms * size
        self.limit_ms = now_ms // tick_ms * tick_ms + self.interval_ms
        self.offset_ms = tick_ms - 1 if bottom else 0
        self.slots = [_Bucket(first_uid + i) for i in range(size)]


class TimerWheel(Generic[T]):
    """A hierarchical timing wheel (Varghese & Lauck), driven by explicit ``now_ms`` values.

    The bottom wheel has ``wheel_size`` slots of ``tick_ms``; each overflow wheel has as many
    slots, each as wide as the whole wheel below it, and is created only when a timer needs
    it. A bucket enters the queue of due buckets (a heap keyed by the bucket's deadline) only
    when it goes from empty to holding a timer, so ``advance`` and ``next_expiry_ms`` touch
    non-empty buckets only, never idle slots. Buckets whose timers were all cancelled are
    dropped lazily when they reach the head of the queue.

    Guarantees: ``advance(now)`` returns every pending timer with ``expire_ms <= now`` and no
    other, sorted by expiry and then by insertion. A caller that calls ``advance`` at each
    ``next_expiry_ms()`` sees every timer fire at most ``tick_ms - 1`` ms after its expiry,
    never before. Time never goes back: an earlier ``now`` counts as the latest one seen.

    Worked example, ``tick_ms=10, wheel_size=4, start_ms=0`` (the bottom wheel spans 40 ms,
    overflow wheel 1 spans 160 ms in 40 ms slots, overflow wheel 2 spans 640 ms in 160 ms
    slots)::

        add(610, "x")     610 is past 0+40 (bottom) and 0+160 (wheel 1), so wheel 2 is made
                          and "x" goes to its slot for [480, 640), due at 480.
        next_expiry_ms()  -> 480: the only queued bucket; the 48 bottom ticks before it
                          are never visited.
        advance(480)      wheel 2's bucket is due: "x" moves down. The bottom wheel now
                          spans [480, 520) and wheel 1 spans [480, 640), so "x" lands in
                          wheel 1's slot for [600, 640), due at 600. Returns [].
        advance(600)      moves "x" into the bottom slot for [610, 620), due at 619
                          (the slot's last ms: the bucket is due once all of it is past).
        advance(615)      that bucket holds "now": its timers at or before 615 fire -> ["x"].
                          (Called at 619 instead, the result is the same, 9 ms late.)

    Args:
        tick_ms: width of a bottom slot, the firing precision.
        wheel_size: slots per wheel.
        start_ms: the wheel's initial "now"; timers at or before it fire on the next advance.

    Raises:
        ValueError: if ``tick_ms < 1`` or ``wheel_size < 2``.
    """

    def __init__(self, *, tick_ms: int = 10, wheel_size: int = 512, start_ms: int) -> None:
        if tick_ms < 1:
            raise ValueError(f"tick_ms must be >= 1, got {tick_ms}")
        if wheel_size < 2:
            raise ValueError(f"wheel_size must be >= 2, got {wheel_size}")
        self._now = start_ms
        self._size = wheel_size
        self._tick = tick_ms
        self._levels = [_Level(tick_ms, wheel_size, start_ms, 1, bottom=True)]
        self._slots0 = self._levels[0].slots
        self._limit0 = self._levels[0].limit_ms
        # First overflow wheel, cached for add's fast path; until it exists its limit equals
        # the bottom's, so the fast-path test never matches.
        self._slots1: list[_Bucket] = []
        self._tick1 = 1
        self._limit1 = self._limit0
        self._overdue = _Bucket(0)  # timers added at or before now: never queued
        self._queue: list[tuple[int, int, _Bucket]] = []
        self._seq = 0  # timers added since the wheel was last empty
        self._gone = 0  # of those, how many fired or were cancelled

    def __len__(self) -> int:
        """The number of pending (not fired, not cancelled) timers."""
        return self._seq - self._gone

    @property
    def now_ms(self) -> int:
        """The latest time passed to ``advance`` (or ``start_ms``)."""
        return self._now

    def add(self, expire_ms: int, item: T) -> TimerHandle:
        """Schedule ``item`` to fire at ``expire_ms``, in O(1).

        Args:
            expire_ms: an integer time in ms; one at or before ``now_ms`` fires on the next
                ``advance``.
            item: the value ``advance`` returns for this timer.

        Returns:
            The handle to pass to ``cancel``.
        """
        h: TimerHandle = _new_handle(TimerHandle)
        seq = self._seq
        self._seq = seq + 1
        h._key = (expire_ms << SEQ_BITS) + seq
        h.item = item
        if expire_ms <= self._now:
            b = self._overdue
        elif expire_ms < self._limit0:
            vid = expire_ms // self._tick
            b = self._slots0[vid % self._size]
            if b.deadline is None:
                self._enqueue(b, vid * self._tick + self._tick - 1)
        elif expire_ms < self._limit1:
            vid = expire_ms // self._tick1
            b = self._slots1[vid % self._size]
            if b.deadline is None:
                self._enqueue(b, vid * self._tick1)
        else:
            self._add_far(h, expire_ms)
            return h
        b.items.append(h)
        h._bucket = b
        return h

    def cancel(self, handle: TimerHandle) -> bool:
        """Cancel a pending timer in O(1) (amortised: buckets are compacted now and then).

        Returns:
            True if the timer was pending; False if it had already fired or been cancelled.
        """
        b = handle._bucket
        if b is None:
            return False
        handle._bucket = None
        b.dead += 1
        self._gone += 1
        if b.dead > 64 and 2 * b.dead > len(b.items):
            b.compact()
        return True

    def advance(self, now_ms: int) -> list[T]:
        """Move the wheel's time to ``now_ms`` and take out every timer due by then.

        Cost is proportional to the timers moved or fired, plus the due buckets visited; empty
        slots are never visited.

        Returns:
            The items of all pending timers with ``expire_ms <= now_ms``, in expiry order,
            ties in insertion order. They are no longer pending.
        """
        now = max(now_ms, self._now)
        self._now = now
        for level in self._levels:
            tick = level.tick_ms
            level.limit_ms = now // tick * tick + level.interval_ms
        self._limit0 = self._levels[0].limit_ms
        self._limit1 = self._levels[1].limit_ms if self._slots1 else self._limit0
        fired: list[TimerHandle] = []
        if self._overdue.items:
            self._place(self._detach(self._overdue), now, fired)
        queue = self._queue
        while queue and queue[0][0] <= now:
            b = heapq.heappop(queue)[2]
            b.deadline = None
            if len(b.items) > b.dead:
                self._place(self._detach(b), now, fired)
            else:
                self._detach(b)
        self._fire_partial(now, fired)
        if not fired:
            return []
        self._gone += len(fired)
        if self._gone == self._seq:  # empty: restart the sequence, far from 2**SEQ_BITS
            self._seq = self._gone = 0
        fired.sort(key=_by_key)
        return [h.item for h in fired]

    def next_expiry_ms(self) -> int | None:
        """The deadline of the earliest bucket that holds a pending timer, or None if empty.

        Calling ``advance`` at that time makes progress: it fires that bucket's timers or
        moves them down a wheel. If timers were added at or before ``now_ms``, returns
        ``now_ms``. Fully cancelled buckets at the head of the queue are dropped here.
        """
        if len(self._overdue.items) > self._overdue.dead:
            return self._now
        queue = self._queue
        while queue:
            deadline, _, b = queue[0]
            if len(b.items) > b.dead:
                return deadline
            heapq.heappop(queue)
            b.deadline = None
            self._detach(b)
        return None

    # -- internals -----------------------------------------------------------------------

    def _enqueue(self, b: _Bucket, deadline: int) -> None:
        b.deadline = deadline
        heapq.heappush(self._queue, (deadline, b.uid, b))

    @staticmethod
    def _detach(b: _Bucket) -> list[TimerHandle]:
        """Empty ``b`` and return its old handles (the live ones still point at ``b``)."""
        items = b.items
        b.items = []
        b.dead = 0
        return items

    def _place(self, items: list[TimerHandle], now: int, fired: list[TimerHandle]) -> None:
        """Fire the live handles of a detached bucket that are due, re-add the others.

        The whole due set is detached before anything is re-added, so a re-added timer
        (all are later than ``now``) never meets a stale bucket in its slot.
        """
        limit0 = self._limit0
        tick = self._tick
        size = self._size
        slots0 = self._slots0
        for h in items:
            if h._bucket is None:
                continue
            expire = h._key >> SEQ_BITS
            if expire <= now:
                h._bucket = None
                fired.append(h)
            elif expire < limit0:
                vid = expire // tick
                b = slots0[vid % size]
                if b.deadline is None:
                    self._enqueue(b, vid * tick + tick - 1)
                b.items.append(h)
                h._bucket = b
            else:
                self._add_far(h, expire)

    def _add_far(self, h: TimerHandle, expire: int) -> None:
        """Put ``h`` in the lowest overflow wheel whose window holds ``expire``."""
        levels = self._levels
        i = 1
        while True:
            if i == len(levels):
                below = levels[-1]
                uid = 1 + len(levels) * self._size
                levels.append(_Level(below.interval_ms, self._size, self._now, uid, False))
                if i == 1:
                    self._slots1 = levels[1].slots
                    self._tick1 = levels[1].tick_ms
                    self._limit1 = levels[1].limit_ms
            level = levels[i]
            if expire < level.limit_ms:
                break
            i += 1
        vid = expire // level.tick_ms
        b = level.slots[vid % self._size]
        if b.deadline is None:
            self._enqueue(b, vid * level.tick_ms)
        b.items.append(h)
        h._bucket = b

    def _fire_partial(self, now: int, fired: list[TimerHandle]) -> None:
        """Fire the due timers of the bottom bucket whose range contains ``now``.

        That bucket stays queued for its later timers; this is the only place a bucket is
        split, and only when ``advance`` is called before a bucket's deadline.
        """
        b = self._slots0[now // self._tick % self._size]
        if b.deadline is None or len(b.items) == b.dead:
            return
        cut = ((now + 1) << SEQ_BITS) - 1
        keep: list[TimerHandle] = []
        for h in b.items:
            if h._bucket is None:
                continue
            if h._key <= cut:
                h._bucket = None
                fired.append(h)
            else:
                keep.append(h)
        b.items = keep
        b.dead = 0
