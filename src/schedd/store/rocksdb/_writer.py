"""One revision of the rocksdb backend, built in memory and written as one WriteBatch."""

from __future__ import annotations

from rocksdict import WriteBatch

from schedd.store._tuple_ops import in_range
from schedd.store._types import KeyValue
from schedd.store.rocksdb._layout import (
    REVISION_KEY,
    Change,
    encode_changes,
    encode_record,
    lease_key,
    live_key,
    log_key,
    u64,
)
from schedd.store.rocksdb._live import LiveKeys


class RevisionWriter:
    """The writes of one transaction (or one lease's end) at ``revision``.

    Reads through it see the state before it (``live``: the applied state) with its own
    writes on top, so ops run in order, each seeing those before it. Nothing reaches the
    database until :meth:`fill` puts everything, the log entry and the new revision into
    one batch (and :attr:`after` then goes to ``live``).
    """

    def __init__(self, live: LiveKeys, revision: int) -> None:
        self.revision = revision
        self._live = live
        self._before: dict[bytes, KeyValue | None] = {}  # per key written: before the txn
        self.after: dict[bytes, KeyValue | None] = {}  # per key written: after it
        # Every change in op order. A key is written once per txn, except where etcd's
        # duplicate check lets it through (a put in one nested txn, a delete range of a
        # later sibling): then the watch sees both, as on etcd.
        self._changes: list[Change] = []

    @property
    def changed(self) -> bool:
        return bool(self._changes)

    def current(self, key: bytes) -> KeyValue | None:
        """The key as this txn sees it: its own write, else the applied state."""
        after = self.after
        if key in after:
            return after[key]
        return self._live.get(key)

    def put(self, key: bytes, value: bytes, lease: int) -> None:
        prev, rev = self.current(key), self.revision
        if prev is None:
            self._record(key, KeyValue(key, value, rev, rev, 1, lease), prev)
        else:
            after = KeyValue(key, value, prev.create_revision, rev, prev.version + 1, lease)
            self._record(key, after, prev)

    def delete(self, start: bytes, end: bytes) -> int:
        """Deletes ``start`` (``end == b""``) or ``[start, end)``; returns how many keys."""
        doomed = self.range(start, end)
        for kv in doomed:
            self._record(kv.key, None, kv)
        return len(doomed)

    def range(self, start: bytes, end: bytes) -> list[KeyValue]:
        if not end:
            kv = self.current(start)
            return [] if kv is None else [kv]
        found: dict[bytes, KeyValue | None] = {kv.key: kv for kv in self._live.scan(start, end)}
        for key, after in self.after.items():
            if in_range(key, start, end):
                found[key] = after
        return [kv for _, kv in sorted(found.items()) if kv is not None]

    def _record(self, key: bytes, after: KeyValue | None, before: KeyValue | None) -> None:
        """``key`` goes from ``before`` (what :meth:`current` says now) to ``after``."""
        if key not in self.after:
            self._before[key] = before
        self.after[key] = after
        self._changes.append((key, before, after))

    def fill(self, batch: WriteBatch) -> list[Change]:
        """Adds this revision to ``batch``: keys, lease index, log entry, revision.

        Returns the revision's changes in op order (what its log entry holds).
        """
        for key, after in self.after.items():
            before = self._before[key]
            if after is None:
                batch.delete(live_key(key))
            else:
                batch.put(live_key(key), encode_record(after))
            if (
                before is not None
                and before.lease
                and (after is None or after.lease != before.lease)
            ):
                batch.delete(lease_key(before.lease, key))
            if after is not None and after.lease:
                batch.put(lease_key(after.lease, key), b"")
        batch.put(log_key(self.revision), encode_changes(self._changes))
        batch.put(REVISION_KEY, u64(self.revision))
        return self._changes
