"""Writes the store refused on their own: counted, logged once, tried again with backoff.

The store refuses a transaction as malformed (:class:`~schedd.store.TxnRejected`, e.g. one
key written twice) whatever its compares say, and it will refuse the same write every time
it is sent. :meth:`PartitionStore.apply <schedd.store.PartitionStore.apply>` isolates such an
item from the rest of its batch; this module decides what happens to the work it carried.
That work is not dropped (the execution or fire it wrote stays durable as it was), nor handed
out again at once: a result redelivered and refused in a tight loop is what wedged settling
when a target's outage made many executions of one job retry at one instant. So each refused
key (an execution id, or a job id for a schedule fire) is re-read after 1 s, 2 s, 4 s, ... up
to 5 minutes, the first refusal is logged as an error with the store's reason, later ones
only at debug level, and each is counted (``schedd_store_rejected_writes_total``).
"""

from __future__ import annotations

from collections import OrderedDict

#: Backoff of the first retry of refused work, and the longest wait between two retries.
FIRST_RETRY_MS = 1_000
MAX_RETRY_MS = 300_000
#: Keys remembered at most; the oldest is forgotten first (its backoff starts over).
MAX_REMEMBERED = 10_000


class RefusedWrites:
    """How often the store refused work of each key, and when it may be tried again."""

    def __init__(
        self,
        first_ms: int = FIRST_RETRY_MS,
        max_ms: int = MAX_RETRY_MS,
        remembered: int = MAX_REMEMBERED,
    ) -> None:
        self._first_ms = first_ms
        self._max_ms = max_ms
        self._remembered = remembered
        self._counts: OrderedDict[str, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._counts)

    def record(self, key: str, now_ms: int) -> tuple[int, int]:
        """One more refusal of ``key``'s work: (how many so far, when to try it again)."""
        count = self._counts.pop(key, 0) + 1
        self._counts[key] = count
        if len(self._counts) > self._remembered:
            self._counts.popitem(last=False)
        wait = min(self._max_ms, self._first_ms << min(count - 1, 20))
        return count, now_ms + wait

    def forget(self, key: str) -> None:
        """``key``'s work was written: a later refusal starts the backoff over."""
        self._counts.pop(key, None)

    def count(self, key: str) -> int:
        return self._counts.get(key, 0)
