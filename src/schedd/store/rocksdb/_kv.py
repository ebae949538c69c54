"""The store contract on an embedded RocksDB: one process, durable, with etcd's semantics.

Open a directory with :meth:`RocksKV.open`; only one process can hold it (RocksDB's lock).
What a caller may rely on beyond :mod:`schedd.store.abc`:

- **Durable when acknowledged.** A write returns only after its batch is in the fsync'd WAL,
  so a claim survives a crash of the machine once its txn has returned.
- **Reads see acknowledged state.** Reads (get, range, count, watch) see the state as of the
  last synced revision, never a write that has not reached the disk yet; a transaction's
  compares see every applied write (its own acknowledgement waits for them to be synced).
- **Leases die with the process.** Lease deadlines live in memory (by the injected clock);
  opening a directory revokes every lease left in it at once, one revision per lease, as an
  expiry would, since the process that held them is gone.

How (see :mod:`._layout` for the keys): the live keys are mirrored in memory, decoded
(:mod:`._live`, loaded at open; ranges walk RocksDB's ordered keys), and each transaction is
evaluated synchronously on the event loop against that applied state, so transactions are
serialised without a lock. It is written as one WriteBatch (keys, lease index, log entry,
revision) without sync, and the mirror takes its writes. The caller then waits for a group
sync: one fsync of the WAL in a thread covers every batch written before it started, so
concurrent writers share it. Reads at the synced revision (or an older one) read the mirror
and undo the log entries of the later revisions; the newest entries are also kept decoded in
memory, so that costs little. Watches replay the log and wake on each sync. The mirror costs
memory in proportion to the live data, as etcd's index and page cache do.

Left out, like the memory backend: ``timeout_s`` is ignored; a watch never lags or breaks
while the store is open; nothing compacts on its own. ``range`` without a limit reads its
whole range in one go on the event loop (``range_all`` yields between pages).
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocksdict import Rdict, WriteBatch, WriteOptions

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
from schedd.store.abc import KV, Compare, Op, StoreFailed
from schedd.store.rocksdb._layout import COMPACTED_KEY, LEASE_KEY, Change, log_key, u64
from schedd.store.rocksdb._live import LiveKeys
from schedd.store.rocksdb._open import StoredMeta, open_store
from schedd.store.rocksdb._reads import (
    Entries,
    leased_keys,
    leases_with_keys,
    log_entries,
    scan_at,
)
from schedd.store.rocksdb._writer import RevisionWriter

#: Log entries a watch reads per step (bounded work on the event loop).
WATCH_CHUNK = 256
#: How many of the newest revisions' changes are kept decoded (for watches and reads).
RECENT = 4096

log = logging.getLogger(__name__)


class RocksKV:
    """The :class:`~schedd.store.abc.KV` contract on RocksDB (see the module docstring).

    Make one with :meth:`open`, never directly.
    """

    ops = TupleOps()

    def __init__(
        self, db: Rdict, live: LiveKeys, path: Path, meta: StoredMeta, clock: Clock
    ) -> None:
        self._db = db
        self._live = live  # the applied state's keys (the database's, in memory)
        self._path = path
        self._clock = clock
        self._unsynced = WriteOptions()
        self._unsynced.sync = False
        self._applied = meta.revision  # written to RocksDB (maybe not synced yet)
        self._durable = meta.revision  # covered by a finished sync
        self._compacted = meta.compacted
        self._next_lease = meta.next_lease
        self._written = 0  # batches written, and how many of them a sync covered
        self._writes = StoreWrites()
        self._synced = 0
        self._syncs = 0
        self._syncing: asyncio.Future[None] | None = None
        self._recent: Entries = []  # the newest revisions' changes, oldest first
        self._lease_table = LeaseTable(self._clock)
        self._leases = self._lease_table.by_id  # read by the op checks and writers
        self._signal = ChangeSignal(self._lease_table)
        self._broken: str | None = None  # why calls are refused (closed, or a failed write)
        self._failed = False  # refused because a write or sync failed (StoreFailed)
        self._closed = False

    @classmethod
    async def open(cls, path: str | Path, *, clock: Clock | None = None) -> RocksKV:
        """Opens (creating) the store in directory ``path`` and revokes the leases left in it.

        Raises:
            FailedPrecondition: another process holds the directory, it is not a schedd
                store, or a newer schedd wrote it (nothing in it was changed).
        """
        db, meta = await asyncio.to_thread(open_store, Path(path))
        try:
            live = await asyncio.to_thread(LiveKeys.load, db)
        except BaseException:
            db.close()
            raise
        if meta.created:
            log.info("created a new, empty schedd store at %s", path)
        else:
            log.info(
                "opened the schedd store at %s (revision %d, %d keys)",
                path,
                meta.revision,
                len(live),
            )
        kv = cls(db, live, Path(path), meta, clock or SystemClock())
        try:
            await kv._revoke_leases_left()
        except BaseException:
            await kv.close()  # release the directory: the caller never got the store
            raise
        return kv

    @property
    def revision(self) -> int:
        """The current (synced) revision."""
        return self._durable

    @property
    def path(self) -> Path:
        return self._path

    @property
    def syncs(self) -> int:
        """WAL syncs so far; with :attr:`batches` it shows how much group commit shares."""
        return self._syncs

    @property
    def batches(self) -> int:
        """Batches written so far (revisions, grants, compactions)."""
        return self._written

    def writes(self) -> StoreWrites:
        return StoreWrites(self._writes.keys, self._writes.bytes)

    async def close(self) -> None:
        """Syncs what was written, then releases the directory; calls fail afterwards."""
        if self._closed:
            return
        self._closed = True
        self._broken = self._broken or f"the schedd store at {self._path} is closed"
        while self._syncing is not None:
            await asyncio.gather(self._syncing, return_exceptions=True)
        self._syncing = asyncio.ensure_future(self._sync(closing=True))
        await asyncio.gather(self._syncing, return_exceptions=True)
        self._wake()

    # -- the write path -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._broken is not None:
            raise (StoreFailed if self._failed else Unavailable)(self._broken)

    def _fail(self, what: str, exc: BaseException) -> Unavailable:
        """Refuses every later call: after a failed write or sync the state on disk is unknown."""
        self._failed = True
        self._broken = (
            f"the schedd store at {self._path} failed ({what}: {exc}); this process can no "
            "longer use it: restart it once the cause is fixed (nothing acknowledged is lost)"
        )
        self._wake()
        return StoreFailed(self._broken)

    def _write(self, batch: WriteBatch) -> int:
        """Writes ``batch`` unsynced; returns its number for :meth:`_sync_to`."""
        size = batch.size_in_bytes()  # a written batch is consumed
        try:
            self._db.write(batch, self._unsynced)
        except Exception as exc:  # rocksdict raises plain Exception with RocksDB's status
            raise self._fail("write", exc) from exc
        self._writes.bytes += size
        self._written += 1
        return self._written

    def _apply(self, writer: RevisionWriter) -> None:
        """Writes the writer's revision, if it changed anything, as the applied state."""
        if not writer.changed:
            return
        batch = WriteBatch(raw_mode=True)
        changes = writer.fill(batch)
        self._write(batch)
        self._writes.keys += len(writer.after)
        self._live.apply(writer.after)
        self._applied = writer.revision
        self._recent.append((writer.revision, changes))
        if len(self._recent) > 2 * RECENT:
            del self._recent[:-RECENT]

    async def _sync_to(self, written: int) -> None:
        """Returns once batch number ``written`` is on disk (joining a sync under way)."""
        while self._synced < written:
            if self._syncing is None:
                self._syncing = asyncio.ensure_future(self._sync())
            await asyncio.shield(self._syncing)

    async def _sync(self, *, closing: bool = False) -> None:
        written, revision = self._written, self._applied
        try:
            if closing:
                await asyncio.to_thread(_sync_and_close, self._db)
            else:
                self._check_open()
                self._syncs += 1
                await asyncio.to_thread(self._db.flush_wal, True)
        except Unavailable:
            raise
        except Exception as exc:
            raise self._fail("sync", exc) from exc
        finally:
            self._syncing = None
        self._synced = max(self._synced, written)
        if revision > self._durable:
            self._durable = revision
            self._wake()

    # -- entering a call ----------------------------------------------------------------------

    async def _enter(self) -> None:
        self._check_open()
        now = self._clock.monotonic()
        due = sorted(i for i, lease in self._leases.items() if lease.deadline <= now)
        for lease_id in due:
            self._leases.pop(lease_id, None)
            self._delete_leased(lease_id)
        if due:
            await self._sync_to(self._written)

    def _delete_leased(self, lease_id: int) -> None:
        """Deletes the lease's keys in one revision (none when it has no keys)."""
        writer = RevisionWriter(self._live, self._applied + 1)
        for key in leased_keys(self._db, lease_id):
            writer.delete(key, b"")
        self._apply(writer)

    async def _revoke_leases_left(self) -> None:
        """Revokes every lease a previous process left: nobody keeps them alive any more."""
        left = leases_with_keys(self._db)
        for lease_id in left:
            self._delete_leased(lease_id)
        if left:
            self._next_lease = max(self._next_lease, left[-1] + 1)
        await self._sync_to(self._written)

    # -- reads --------------------------------------------------------------------------------

    def _changes(self, first: int, last: int, most: int) -> Entries:
        """The changes of revisions ``first..last`` (at most ``most``), from memory if kept."""
        if first > last:
            return []
        recent = self._recent
        if recent and recent[0][0] <= first:
            at = bisect.bisect_left(recent, first, key=lambda entry: entry[0])
            return recent[at : at + min(most, last - first + 1)]
        return log_entries(self._db, first, last, most)

    def _read(
        self, start: bytes, end: bytes, revision: int, *, limit: int = 0, keys_only: bool = False
    ) -> list[KeyValue]:
        """Keys in ``[start, end)`` as of ``revision`` (0: the synced one): synchronous."""
        revision = revision if revision > 0 else self._durable
        if revision < self._compacted:
            raise RevisionCompacted(
                f"required revision {revision} has been compacted (at {self._compacted})"
            )
        if revision > self._durable:
            raise Unavailable(f"required revision {revision} is a future revision")
        later = self._changes(revision + 1, self._applied, self._applied - revision)
        found = scan_at(self._live, start, end, later, limit=limit)
        if keys_only:
            found = [kv._replace(value=b"") for kv in found]
        return found

    async def get(self, key: bytes) -> KeyValue | None:
        await self._enter()
        if self._durable == self._applied:
            return self._live.get(key)
        found = self._read(key, b"", 0)
        return found[0] if found else None

    async def range(
        self,
        start: bytes,
        end: bytes,
        *,
        limit: int = 0,
        revision: int = 0,
        keys_only: bool = False,
    ) -> tuple[list[KeyValue], int, bool]:
        await self._enter()
        found = self._read(start, end, revision, limit=limit, keys_only=keys_only)
        more = bool(limit) and len(found) > limit
        return (found[:limit] if limit else found), self._durable, more

    async def range_all(
        self,
        start: bytes,
        end: bytes,
        *,
        page: int = 2000,
        revision: int = 0,
        keys_only: bool = False,
    ) -> tuple[list[KeyValue], int]:
        """Reads pages all at one revision, with the event loop free between them."""
        await self._enter()
        revision = revision if revision > 0 else self._durable
        page = max(page, 1)
        out: list[KeyValue] = []
        lower = start
        while True:
            chunk = self._read(lower, end, revision, limit=page, keys_only=keys_only)
            out += chunk[:page]
            if len(chunk) <= page or not end:
                return out, revision
            lower = chunk[page - 1].key + b"\x00"  # the next key after the last one kept
            await asyncio.sleep(0)
            self._check_open()

    async def get_many(self, keys: Sequence[bytes], *, per_txn: int = 128) -> list[KeyValue | None]:
        await self._enter()
        if self._durable == self._applied:
            return [self._live.get(key) for key in keys]
        found = (self._read(key, b"", 0) for key in keys)
        return [kvs[0] if kvs else None for kvs in found]

    async def count(self, start: bytes, end: bytes) -> int:
        await self._enter()
        if self._durable == self._applied:
            return self._live.count(start, end)
        return len(self._read(start, end, 0, keys_only=True))

    # -- writes -------------------------------------------------------------------------------

    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
        *,
        timeout_s: float | None = None,
    ) -> TupleTxnResult:
        await self._enter()
        # From here to _apply nothing awaits: the txn sees and changes one state, alone.
        check_request(success)
        check_request(failure)
        writer = RevisionWriter(self._live, self._applied + 1)
        ok, steps = plan(compares, success, failure, functools.partial(_holds, writer))
        check_leases(steps, self._leases)
        responses = run_steps(steps, writer)
        self._apply(writer)
        revision = self._applied  # what this txn saw (or wrote): acknowledge it once synced
        await self._sync_to(self._written)
        return TupleTxnResult(ok, revision, responses)

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        return (await self.txn((), (self.ops.put(key, value, lease),))).revision

    async def delete(self, key: bytes, end: bytes | None = None) -> int:
        result = await self.txn((), (self.ops.delete(key, end or b""),))
        deleted: int = result._responses[0]
        return deleted

    async def compact(self, revision: int) -> None:
        await self._enter()
        if revision <= self._compacted:
            return
        if revision > self._applied:
            raise Unavailable(f"compact: revision {revision} is a future revision")
        self._compacted = revision
        batch = WriteBatch(raw_mode=True)
        batch.delete_range(log_key(0), log_key(revision))
        batch.put(COMPACTED_KEY, u64(revision))
        written = self._write(batch)
        self._wake()  # watchers behind the compaction learn it now
        await self._sync_to(written)

    # -- leases -------------------------------------------------------------------------------

    async def grant(self, ttl_s: int) -> int:
        await self._enter()
        lease_id = self._next_lease
        self._next_lease += 1
        batch = WriteBatch(raw_mode=True)
        batch.put(LEASE_KEY, u64(self._next_lease))  # ids are never reused across restarts
        written = self._write(batch)
        self._lease_table.grant(lease_id, ttl_s)
        self._wake()  # watchers re-arm their expiry timers
        await self._sync_to(written)
        return lease_id

    async def keepalive_once(self, lease_id: int) -> int:
        await self._enter()
        return self._lease_table.keepalive(lease_id)

    async def revoke(self, lease_id: int) -> None:
        await self._enter()
        if self._leases.pop(lease_id, None) is None:
            return
        self._delete_leased(lease_id)
        await self._sync_to(self._written)

    # -- watch --------------------------------------------------------------------------------

    async def watch(
        self, start: bytes, end: bytes, start_revision: int
    ) -> AsyncIterator[WatchBatch]:
        await self._enter()
        next_rev = start_revision if start_revision > 0 else self._durable + 1
        while True:
            await self._enter()
            if next_rev < self._compacted:
                raise WatchCompacted(self._compacted)
            pending = self._changes(next_rev, self._durable, WATCH_CHUNK)
            for rev, changes in pending:
                next_rev = rev + 1
                mine = _events(rev, changes, start, end)
                if mine:
                    yield WatchBatch(rev, mine)
            if not pending:
                next_rev = max(next_rev, self._durable + 1)  # past revisions without entries
                await self._signal.wait()

    def _wake(self) -> None:
        self._signal.wake()


def _events(revision: int, changes: list[Change], start: bytes, end: bytes) -> list[WatchEvent]:
    out: list[WatchEvent] = []
    for key, _, after in changes:
        if not in_range(key, start, end):
            continue
        if after is None:
            out.append(WatchEvent("delete", KeyValue(key, b"", 0, revision, 0, 0)))
        else:
            out.append(WatchEvent("put", after))
    return out


def _sync_and_close(db: Rdict) -> None:
    try:
        db.flush_wal(True)
    finally:
        db.close()  # releases the directory's lock even when the sync failed


if TYPE_CHECKING:  # the type checker proves the backend meets the contract

    def _contract(kv: RocksKV) -> KV:
        return kv


def _holds(writer: RevisionWriter, compare: Any) -> bool:
    """Whether a compare holds in the applied state (the txn's compares all run before any
    of its writes, so the writer's view is that state)."""
    return compare_holds(compare, writer.current(compare[1]))
