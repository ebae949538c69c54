"""An in-memory backend of the store contract, with etcd's semantics, for simulation tests.

One process, one event loop, no I/O: every call yields to the loop once (so concurrent
callers interleave as they would over a network) and then runs to completion atomically.
Time is an injected :class:`~schedd._clock.Clock`, so leases expire when a
:class:`~schedd._clock.ManualClock` is advanced, never by sleeping. Faults are injected by a
seeded :class:`FaultPlan`, so a failing schedule replays exactly::

    kv = MemoryKV(clock=ManualClock())
    kv.faults = FaultPlan(random.Random(7), fail_before=0.05, fail_after=0.05)

What it leaves out of etcd (the contract suite shows what it keeps): no minimum lease TTL,
no request size or ops-per-txn limits, no authentication, ``timeout_s`` and ``page`` are
ignored (a range is one read), a watch delivers one batch per revision and never lags,
breaks (unless a :class:`FaultPlan` breaks it) or gets progress notifications, and the
history kept for reads in the past and watches grows until :meth:`MemoryKV.compact`
(nothing compacts on its own).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import random
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sortedcontainers import SortedDict

from schedd._clock import Clock, SystemClock
from schedd._errors import Unavailable
from schedd.store._leases import ChangeSignal, LeaseTable
from schedd.store._tuple_ops import (
    TupleOps,
    TupleTxnResult,
    check_leases,
    check_request,
    compare_holds,
    in_range,
    keys_in,
    plan,
    run_steps,
)
from schedd.store._types import (
    KeyValue,
    RevisionCompacted,
    StoreWrites,
    WatchBatch,
    WatchCompacted,
    WatchEvent,
)
from schedd.store.abc import KV, Compare, Op


@dataclass
class FaultPlan:
    """Which calls fail, drawn from a seeded ``rng``.

    Attributes:
        rng: the source of every draw (seed it to replay a run).
        fail_before: chance that a write (txn, put, delete) raises Unavailable unapplied.
        fail_after: chance that a write is applied and then raises Unavailable anyway (the
            caller cannot tell it from ``fail_before``: an unknown outcome).
        fail_reads: chance that a read (get, range, get_many, count) raises Unavailable.
        break_watches: chance that a watch stream breaks (raises Unavailable) instead of
            delivering a batch, as etcd's do on leader changes and network trouble; the
            watcher must re-watch or re-list and carry on.
    """

    rng: random.Random
    fail_before: float = 0.0
    fail_after: float = 0.0
    fail_reads: float = 0.0
    break_watches: float = 0.0

    def draw(self, chance: float) -> bool:
        return chance > 0 and self.rng.random() < chance


class MemoryKV:
    """The :class:`~schedd.store.abc.KV` contract in memory (see the module docstring).

    Args:
        clock: drives lease expiry (its ``monotonic``); a ManualClock in simulations.

    Attributes:
        faults: the fault plan; None (the default) injects nothing.
    """

    ops = TupleOps()

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._clock: Clock = clock or SystemClock()
        self.faults: FaultPlan | None = None
        self._revision = 1  # like a fresh etcd
        self._compacted = 0
        self._writes = StoreWrites()
        self._live: SortedDict = SortedDict()  # key -> KeyValue, as of now
        self._history: SortedDict = SortedDict()  # key -> [(revision, KeyValue | None)]
        self._events: list[tuple[int, list[WatchEvent]]] = []  # per revision, since compaction
        self._lease_table = LeaseTable(self._clock)
        self._leases = self._lease_table.by_id  # read by the op checks and writers
        self._lease_ids = itertools.count(0x1000)
        self._signal = ChangeSignal(self._lease_table)
        self._closed = False

    @property
    def revision(self) -> int:
        """The current revision (for tests and simulations)."""
        return self._revision

    def writes(self) -> StoreWrites:
        return StoreWrites(self._writes.keys, self._writes.bytes)

    async def close(self) -> None:
        self._closed = True
        self._wake()

    async def _enter(self, what: str, chance: float = 0.0) -> None:
        await asyncio.sleep(0)
        if self._closed:
            raise Unavailable("memory store is closed")
        self.expire_leases()
        if self.faults is not None and self.faults.draw(chance):
            raise Unavailable(f"injected fault: {what} not applied")

    async def _enter_write(self, what: str) -> None:
        await self._enter(what, self.faults.fail_before if self.faults else 0.0)

    def _leave_write(self, what: str) -> None:
        if self.faults is not None and self.faults.draw(self.faults.fail_after):
            raise Unavailable(f"injected fault: {what} applied, answer lost")

    async def _enter_read(self, what: str) -> None:
        await self._enter(what, self.faults.fail_reads if self.faults else 0.0)

    # -- reads -------------------------------------------------------------------------------

    async def get(self, key: bytes) -> KeyValue | None:
        await self._enter_read("get")
        kv: KeyValue | None = self._live.get(key)
        return kv

    async def range(
        self,
        start: bytes,
        end: bytes,
        *,
        limit: int = 0,
        revision: int = 0,
        keys_only: bool = False,
    ) -> tuple[list[KeyValue], int, bool]:
        await self._enter_read("range")
        found = self._read(start, end, revision)
        more = bool(limit) and len(found) > limit
        if limit:
            found = found[:limit]
        if keys_only:
            found = [KeyValue(kv.key, b"", *_revs(kv)) for kv in found]
        return found, self._revision, more

    async def range_all(
        self,
        start: bytes,
        end: bytes,
        *,
        page: int = 2000,
        revision: int = 0,
        keys_only: bool = False,
    ) -> tuple[list[KeyValue], int]:
        kvs, current, _ = await self.range(start, end, revision=revision, keys_only=keys_only)
        return kvs, revision or current

    async def get_many(self, keys: Sequence[bytes], *, per_txn: int = 128) -> list[KeyValue | None]:
        await self._enter_read("get_many")
        return [self._live.get(k) for k in keys]

    async def count(self, start: bytes, end: bytes) -> int:
        await self._enter_read("count")
        return sum(1 for _ in keys_in(self._live, start, end))

    def _read(self, start: bytes, end: bytes, revision: int) -> list[KeyValue]:
        if revision <= 0 or revision == self._revision:
            return [self._live[k] for k in keys_in(self._live, start, end)]
        if revision < self._compacted:
            raise RevisionCompacted(
                f"required revision {revision} has been compacted (at {self._compacted})"
            )
        if revision > self._revision:
            raise Unavailable(f"required revision {revision} is a future revision")
        out = []
        for key in keys_in(self._history, start, end):
            kv = _as_of(self._history[key], revision)
            if kv is not None:
                out.append(kv)
        return out

    def changes_after(self, revision: int) -> list[tuple[int, list[WatchEvent]]]:
        """Every committed change after ``revision``, oldest first, as (revision, events).

        For checkers in simulations: it neither yields to the loop nor draws faults, so a
        checker sees exactly what the store committed, in order. Changes compacted away are
        not returned (nothing compacts unless :meth:`compact` is called).
        """
        first = bisect.bisect_right(self._events, revision, key=lambda e: e[0])
        return self._events[first:]

    # -- writes ------------------------------------------------------------------------------

    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
        *,
        timeout_s: float | None = None,
    ) -> TupleTxnResult:
        await self._enter_write("txn")
        check_request(success)
        check_request(failure)
        ok, steps = plan(compares, success, failure, self._holds)
        check_leases(steps, self._leases)
        writer = _Writer(self, self._revision + 1)
        responses = run_steps(steps, writer)
        writer.commit()
        result = TupleTxnResult(ok, self._revision, responses)
        self._leave_write("txn")
        return result

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        return (await self.txn((), (self.ops.put(key, value, lease),))).revision

    async def delete(self, key: bytes, end: bytes | None = None) -> int:
        result = await self.txn((), (self.ops.delete(key, end or b""),))
        deleted: int = result._responses[0]
        return deleted

    def _holds(self, compare: Any) -> bool:
        return compare_holds(compare, self._live.get(compare[1]))

    async def compact(self, revision: int) -> None:
        await self._enter("compact")
        if revision <= self._compacted:
            return
        if revision > self._revision:
            raise Unavailable(f"compact: revision {revision} is a future revision")
        self._compacted = revision
        for key in list(self._history):
            kept = _compact_history(self._history[key], revision)
            if kept:
                self._history[key] = kept
            else:
                del self._history[key]
        self._events = [(rev, evs) for rev, evs in self._events if rev >= revision]
        self._wake()

    # -- leases ------------------------------------------------------------------------------

    async def grant(self, ttl_s: int) -> int:
        await self._enter("lease grant")
        lease_id = next(self._lease_ids)
        self._lease_table.grant(lease_id, ttl_s)
        self._wake()  # watchers re-arm their expiry timers
        return lease_id

    async def keepalive_once(self, lease_id: int) -> int:
        await self._enter("lease keep-alive")
        return self._lease_table.keepalive(lease_id)

    async def revoke(self, lease_id: int) -> None:
        await self._enter("lease revoke")
        self._end_lease(lease_id)

    def expire_leases(self) -> None:
        """Ends every lease whose TTL passed since its grant or last keep-alive.

        Every call of the store does this first; a simulation may call it after advancing
        the clock so that watchers see the deletes without another call.
        """
        now = self._clock.monotonic()
        for lease_id in sorted(i for i, lease in self._leases.items() if lease.deadline <= now):
            self._end_lease(lease_id)

    def _end_lease(self, lease_id: int) -> None:
        lease = self._leases.pop(lease_id, None)
        if lease is None or not lease.keys:
            return
        writer = _Writer(self, self._revision + 1)
        for key in sorted(lease.keys):
            writer.delete(key, b"")
        writer.commit()

    # -- watch -------------------------------------------------------------------------------

    async def watch(
        self, start: bytes, end: bytes, start_revision: int
    ) -> AsyncIterator[WatchBatch]:
        await self._enter("watch")
        next_rev = start_revision if start_revision > 0 else self._revision + 1
        while True:
            if self._closed:
                raise Unavailable("memory store is closed")
            self.expire_leases()
            if next_rev < self._compacted:
                raise WatchCompacted(self._compacted)
            first = bisect.bisect_left(self._events, next_rev, key=lambda e: e[0])
            pending = self._events[first:]
            for rev, evs in pending:
                next_rev = rev + 1
                mine = [ev for ev in evs if in_range(ev.kv.key, start, end)]
                if mine:
                    if self.faults is not None and self.faults.draw(self.faults.break_watches):
                        raise Unavailable("injected fault: watch stream broke")
                    yield WatchBatch(rev, mine)
            if not pending:
                await self._signal.wait()

    def _wake(self) -> None:
        self._signal.wake()


class _Writer:
    """Applies one transaction's writes at ``revision``; :meth:`commit` publishes them."""

    def __init__(self, kv: MemoryKV, revision: int) -> None:
        self._kv = kv
        self.revision = revision
        self.events: list[WatchEvent] = []

    def put(self, key: bytes, value: bytes, lease: int) -> None:
        kv, rev = self._kv, self.revision
        prev: KeyValue | None = kv._live.get(key)
        if prev is not None and prev.lease and prev.lease != lease and prev.lease in kv._leases:
            kv._leases[prev.lease].keys.discard(key)
        if lease:
            kv._leases[lease].keys.add(key)
        if prev is None:
            new = KeyValue(key, value, rev, rev, 1, lease)
        else:
            new = KeyValue(key, value, prev.create_revision, rev, prev.version + 1, lease)
        self._record(new, WatchEvent("put", new))

    def range(self, start: bytes, end: bytes) -> list[KeyValue]:
        """The keys as the txn sees them: its earlier writes are in the live state already."""
        live = self._kv._live
        return [live[k] for k in keys_in(live, start, end)]

    def delete(self, start: bytes, end: bytes) -> int:
        kv = self._kv
        doomed = list(keys_in(kv._live, start, end))
        for key in doomed:
            prev: KeyValue = kv._live[key]
            if prev.lease and prev.lease in kv._leases:
                kv._leases[prev.lease].keys.discard(key)
            self._record(None, WatchEvent("delete", KeyValue(key, b"", 0, self.revision, 0, 0)))
        return len(doomed)

    def _record(self, new: KeyValue | None, event: WatchEvent) -> None:
        kv, key = self._kv, event.kv.key
        if new is None:
            del kv._live[key]
        else:
            kv._live[key] = new
        kv._history.setdefault(key, []).append((self.revision, new))
        self.events.append(event)
        kv._writes.keys += 1
        kv._writes.bytes += len(key) + (len(new.value) if new is not None else 0)

    def commit(self) -> None:
        if not self.events:
            return  # nothing changed: the revision stays
        self._kv._revision = self.revision
        self._kv._events.append((self.revision, self.events))
        self._kv._wake()


def _revs(kv: KeyValue) -> tuple[int, int, int, int]:
    return kv.create_revision, kv.mod_revision, kv.version, kv.lease


def _as_of(history: list[tuple[int, KeyValue | None]], revision: int) -> KeyValue | None:
    """The key as of ``revision``: its last write at or before it (None: absent then)."""
    found: KeyValue | None = None
    for rev, kv in history:
        if rev > revision:
            break
        found = kv
    return found


def _compact_history(
    history: list[tuple[int, KeyValue | None]], revision: int
) -> list[tuple[int, KeyValue | None]]:
    """What a key keeps after compaction at ``revision``: its state then, and later writes."""
    later = [(rev, kv) for rev, kv in history if rev > revision]
    then = _as_of(history, revision)
    return ([(then.mod_revision, then)] if then is not None else []) + later


if TYPE_CHECKING:  # the type checker proves the backend meets the contract
    _contract: KV = MemoryKV()
