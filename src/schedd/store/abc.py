"""The store contract: a revisioned key-value store with etcd's semantics.

Every backend (:mod:`schedd.store.etcd`, :mod:`schedd.store.memory`, :mod:`schedd.store.rocksdb`)
implements :class:`KV`; ``tests/contract/`` runs one suite against each and is the executable
form of these rules.

The model, which a caller may rely on:

- **One global revision.** Every transaction that changes something (a put, or a delete that
  removes at least one key) advances the store's revision by exactly one, and every key it
  writes carries that revision as ``mod_revision``. A transaction that writes nothing (only
  reads, failed compares with no failure ops, a delete of nothing) leaves it unchanged.
- **Per key**: ``create_revision`` (revision of the write that created it), ``mod_revision``
  (of its last write), ``version`` (writes since creation; 1 when created, back to 1 when
  deleted and created again) and ``lease`` (0 for none). An absent key has all four at 0,
  which is what compares see: ``cmp_create(key, 0)`` means "the key does not exist".
- **Ranges** ``[start, end)`` are in byte order; ``end == b"\\x00"`` means "to the last key".
  A read may ask for an older ``revision``; one older than the last compaction raises
  :class:`RevisionCompacted`, one newer than the current revision :class:`Unavailable`.
- **Transactions** are all-or-nothing. The compares of the whole tree (the outer ones and
  those of nested transactions, on the branch the outer outcome selects) are evaluated
  against the state *before* any op of the transaction; then the chosen ops run in order,
  each seeing the writes of the ops before it. A key may not be written twice in one
  transaction branch (two puts, or a put and a delete range that covers it): the backend
  raises :class:`TxnRejected` and applies nothing, whatever the compares say.
- **Leases**: a key put with ``lease=id`` is deleted (one revision per lease, with watch
  events) when the lease is revoked or expires: ``ttl`` seconds after the grant or the last
  keep-alive. Putting with an unknown lease raises :class:`Unavailable` and applies nothing.
- **Watches** deliver every change in ``[start, end)`` with revision >= ``start_revision``,
  in revision order, each change once, in :class:`WatchBatch` es; a start revision older
  than the last compaction raises :class:`WatchCompacted` (re-list, then watch again).
- **Compaction** at revision C forgets history before C: reads at a revision < C fail; the
  state at C and after stays readable.
- **Errors**: any failure to reach the store raises :class:`Unavailable`. A write that
  raises may or may not have been applied (an unknown outcome): callers re-read (every
  write we make is guarded by compares, so a retry is safe).

Ops are opaque: make them with the backend's builder (``kv.ops``) and pass them back to the
same backend. The etcd builder returns protobuf wire bytes and its :meth:`KV.txn` joins them,
so a claim of 128 nested transactions costs a few byte concatenations, not 128 messages::

    ops = kv.ops
    item = ops.txn([ops.cmp_create(run_key, 0)], [ops.put(run_key, value)])
    result = await kv.txn([ops.cmp_create(owner_key, epoch)], [item, ...])
    if result.succeeded and result.txn_succeeded(0):
        token = result.revision
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol, TypeAlias

from schedd._errors import SchedError, Unavailable
from schedd.store._types import KeyValue, StoreWrites, WatchBatch

#: A compare made by :meth:`OpBuilder.cmp_create` or :meth:`OpBuilder.cmp_mod`: opaque.
Compare: TypeAlias = object
#: A request made by :class:`OpBuilder` (put, delete, get, nested txn): opaque.
Op: TypeAlias = object


class TxnRejected(SchedError):
    """The store refused a transaction as malformed (e.g. a key written twice); nothing applied.

    A programming error, never transient: retrying the same transaction fails the same way.
    """

    grpc_code = "INTERNAL"


class StoreFailed(Unavailable):
    """The store can no longer be used by this process: a write or sync to its disk failed
    (a full disk, an I/O error), so what is on disk is unknown to it. Every later call fails
    the same way; a new process (a restart, once the cause is fixed) opens it afresh and
    finds everything that was acknowledged."""


class KeyValueView(Protocol):
    """Read-only view of a stored key (a :class:`KeyValue`, or a backend's own record)."""

    @property
    def key(self) -> bytes: ...
    @property
    def value(self) -> bytes: ...
    @property
    def create_revision(self) -> int: ...
    @property
    def mod_revision(self) -> int: ...
    @property
    def version(self) -> int: ...
    @property
    def lease(self) -> int: ...


class OpBuilder(Protocol):
    """Makes a backend's compares and ops. Pure: building sends nothing."""

    def cmp_create(self, key: bytes, create_revision: int) -> Compare:
        """Holds when ``key``'s create revision equals this (0: the key does not exist)."""
        ...

    def cmp_mod(self, key: bytes, mod_revision: int) -> Compare:
        """Holds when ``key`` was last written at this revision (0: the key does not exist)."""
        ...

    def put(self, key: bytes, value: bytes, lease: int = 0) -> Op:
        """Writes ``key`` (attached to ``lease``; 0 detaches it from any lease)."""
        ...

    def delete(self, key: bytes, end: bytes = b"") -> Op:
        """Deletes ``key``, or every key in ``[key, end)`` when ``end`` is given."""
        ...

    def get(self, key: bytes, end: bytes = b"") -> Op:
        """Reads ``key``, or ``[key, end)``; the result is :meth:`TxnResult.kvs` of its index."""
        ...

    def txn(
        self, compares: Sequence[Compare], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> Op:
        """A nested transaction: its compares choose its branch, independently of siblings."""
        ...


class TxnResult(Protocol):
    """What a transaction returns; accessors are by op index in the branch that ran."""

    @property
    def succeeded(self) -> bool:
        """True when the compares held (the success ops ran), False when failure ops ran."""
        ...

    @property
    def revision(self) -> int:
        """The store's revision after the txn: the ``mod_revision`` of every key it wrote."""
        ...

    def __len__(self) -> int:
        """How many ops ran (those of the chosen branch)."""
        ...

    def kvs(self, index: int) -> Sequence[KeyValueView]:
        """Keys read by the get op at ``index``, in key order."""
        ...

    def txn_succeeded(self, index: int) -> bool:
        """Whether the nested transaction at ``index`` took its success branch."""
        ...

    def nested_outcomes(self) -> list[bool]:
        """Per op, :meth:`txn_succeeded` (False for an op that is not a nested txn): one call
        for a batch of items, cheap on every backend."""
        ...

    def nested(self, index: int) -> TxnResult:
        """The result of the nested transaction at ``index`` (``revision``: the outer one's)."""
        ...


class KV(Protocol):
    """A revisioned key-value store with leases, nested transactions, watches and compaction."""

    @property
    def ops(self) -> OpBuilder:
        """The builder of this backend's compares and ops (bind its methods once: it is fixed)."""
        ...

    async def close(self) -> None:
        """Releases the connection; the object is unusable afterwards."""
        ...

    def writes(self) -> StoreWrites | None:
        """What this process wrote since it opened the store; None when the backend does not
        count (etcd: its own metrics do)."""
        ...

    # -- reads -------------------------------------------------------------------------------

    async def get(self, key: bytes) -> KeyValue | None:
        """The key as of now, or None when absent."""
        ...

    async def range(
        self,
        start: bytes,
        end: bytes,
        *,
        limit: int = 0,
        revision: int = 0,
        keys_only: bool = False,
    ) -> tuple[list[KeyValue], int, bool]:
        """Keys in ``[start, end)`` in key order: (kvs, current revision, more).

        Args:
            limit: at most this many keys (0: all); ``more`` says whether keys were left out.
            revision: read the state as of this revision (0: now). The returned revision is
                the store's current one either way.
            keys_only: leave values empty.

        Raises:
            RevisionCompacted: ``revision`` is older than the last compaction.
        """
        ...

    async def range_all(
        self,
        start: bytes,
        end: bytes,
        *,
        page: int = 2000,
        revision: int = 0,
        keys_only: bool = False,
    ) -> tuple[list[KeyValue], int]:
        """Every key in ``[start, end)``, read in pages all at one revision, and that revision."""
        ...

    async def get_many(self, keys: Sequence[bytes], *, per_txn: int = 128) -> list[KeyValue | None]:
        """Each key (None where absent), in order, ``per_txn`` keys per round trip."""
        ...

    async def count(self, start: bytes, end: bytes) -> int:
        """How many keys are in ``[start, end)`` now."""
        ...

    # -- writes ------------------------------------------------------------------------------

    async def txn(
        self,
        compares: Sequence[Compare],
        success: Sequence[Op],
        failure: Sequence[Op] = (),
        *,
        timeout_s: float | None = None,
    ) -> TxnResult:
        """One transaction, sent once (never retried: on Unavailable the outcome is unknown).

        Raises:
            TxnRejected: a key is written twice in one branch; nothing was applied.
            Unavailable: the store could not be reached, or a put names an unknown lease.
        """
        ...

    async def put(self, key: bytes, value: bytes, *, lease: int = 0) -> int:
        """An unguarded put (for keys only this process writes); returns its revision."""
        ...

    async def delete(self, key: bytes, end: bytes | None = None) -> int:
        """Deletes ``key`` (or ``[key, end)``); returns how many keys were deleted."""
        ...

    async def compact(self, revision: int) -> None:
        """Forgets history before ``revision``; compacting an already compacted one is a no-op."""
        ...

    # -- leases ------------------------------------------------------------------------------

    async def grant(self, ttl_s: int) -> int:
        """A new lease living ``ttl_s`` seconds unless kept alive; returns its id (> 0)."""
        ...

    async def keepalive_once(self, lease_id: int) -> int:
        """Refreshes the lease once; returns its TTL in seconds (<= 0: expired or unknown)."""
        ...

    async def revoke(self, lease_id: int) -> None:
        """Ends the lease now, deleting its keys; an unknown or expired lease is a no-op."""
        ...

    # -- watch -------------------------------------------------------------------------------

    def watch(self, start: bytes, end: bytes, start_revision: int) -> AsyncIterator[WatchBatch]:
        """Changes in ``[start, end)`` from ``start_revision`` on, until the caller stops.

        Raises (while iterating):
            WatchCompacted: the start revision is compacted; re-list and watch again.
            Unavailable: the stream broke.
        """
        ...
