"""The per-timer handle and the bucket that holds handles of one wheel slot.

Both classes use ``__slots__`` and no per-instance dict: at a million pending timers the
handle is the dominant memory cost, so it carries exactly three references.
"""

from __future__ import annotations

from typing import Any, Final

#: Bits of the sort key reserved for the insertion sequence number. The key is
#: ``(expire_ms << SEQ_BITS) + seq``, so one integer orders timers by expiry and then by
#: insertion (2**48 adds fit before the sequence is reset on an empty wheel).
SEQ_BITS: Final = 48
SEQ_LIMIT: Final = 1 << SEQ_BITS


class TimerHandle:
    """A pending timer, returned by ``add`` and accepted by ``cancel``.

    A handle is pending from ``add`` until it fires or is cancelled; after that it is inert
    and cancelling it again returns False. Handles are not shared between wheels.

    Attributes:
        item: the value handed back by ``advance`` when the timer fires.
    """

    __slots__ = ("_bucket", "_key", "item")

    _key: int
    item: Any
    # The bucket that currently holds the handle, or
    # None once the timer has fired or been cancelled.
    _bucket: _Bucket | None

    @property
    def expire_ms(self) -> int:
        """The expiry time in ms that the timer was added with."""
        return self._key >> SEQ_BITS

    @property
    def pending(self) -> bool:
        """True until the timer fires or is cancelled."""
        return self._bucket is not None

    def __repr__(self) -> str:
        state = "pending" if self._bucket is not None else "done"
        return f"TimerHandle(expire_ms={self.expire_ms}, item={self.item!r}, {state})"


class _Bucket:
    """The handles of one wheel slot for one slot-sized range of time.

    Cancelled handles stay in ``items`` (cancel is O(1)) until the bucket is flushed or
    compacted; ``dead`` counts them, so the pending ones number ``len(items) - dead`` and
    adding a timer touches no counter. ``deadline`` is the time at which the
    bucket must be handled and is not None exactly while the bucket sits in the wheel's queue.
    """

    __slots__ = ("dead", "deadline", "items", "uid")

    def __init__(self, uid: int) -> None:
        self.uid = uid  # breaks deadline ties in the heap without comparing buckets
        self.items: list[TimerHandle] = []
        self.dead = 0
        self.deadline: int | None = None

    def compact(self) -> None:
        """Drop cancelled handles, keeping insertion order (amortised O(1) per cancel)."""
        self.items = [h for h in self.items if h._bucket is self]
        self.dead = 0
