"""What the in-process backends (memory, rocksdb) share about time: leases with deadlines on an
injected clock, and the signal watchers wait on until the store changes or a lease is due."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from schedd._clock import Clock


@dataclass
class Lease:
    """A granted lease: its TTL, when it expires (the clock's ``monotonic``), and, for a
    backend that keeps them in memory, the keys attached to it."""

    ttl_s: int
    deadline: float
    keys: set[bytes] = field(default_factory=set)


class LeaseTable:
    """The live leases by id; expiry follows ``clock``, so a ManualClock drives it in tests."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.by_id: dict[int, Lease] = {}

    def grant(self, lease_id: int, ttl_s: int) -> None:
        self.by_id[lease_id] = Lease(ttl_s, self.clock.monotonic() + ttl_s)

    def keepalive(self, lease_id: int) -> int:
        """Refreshes the lease; its TTL, or 0 when it is unknown (expired, revoked)."""
        lease = self.by_id.get(lease_id)
        if lease is None:
            return 0
        lease.deadline = self.clock.monotonic() + lease.ttl_s
        return lease.ttl_s

    def pop(self, lease_id: int) -> Lease | None:
        return self.by_id.pop(lease_id, None)

    def expired(self) -> list[tuple[int, Lease]]:
        """Removes and returns the leases whose deadline passed, by id."""
        now = self.clock.monotonic()
        due = sorted(i for i, lease in self.by_id.items() if lease.deadline <= now)
        return [(i, self.by_id.pop(i)) for i in due]

    def first_deadline(self) -> float | None:
        return min((lease.deadline for lease in self.by_id.values()), default=None)


class ChangeSignal:
    """Wakes every watcher waiting in :meth:`wait` when :meth:`wake` is called, or when the
    first lease of ``leases`` is due (its expiry is a change they must see)."""

    def __init__(self, leases: LeaseTable) -> None:
        self._leases = leases
        self._changed = asyncio.Event()

    def wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def wait(self) -> None:
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._changed.wait())]
        first = self._leases.first_deadline()
        if first is not None:
            clock = self._leases.clock
            waits.append(asyncio.ensure_future(clock.sleep(first - clock.monotonic())))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
