"""Reads of the rocksdb backend: its log and lease index, and the state as of a revision.

The applied state (every batch written, synced or not) is the database's ``k`` records and
their mirror in memory (:class:`~._live.LiveKeys`), which answers reads of it. A read at an
older revision, including the last synced one while a sync is under way, starts from the
mirror and undoes the changes of every later revision with the records they replaced
(:func:`scan_at`).

Every function is synchronous and does work proportional to what it returns plus the
changes it undoes: callers on the event loop keep both bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rocksdict import Rdict, ReadOptions

from schedd.store._tuple_ops import in_range
from schedd.store._types import KeyValue, prefix_end
from schedd.store.rocksdb._layout import (
    LEASED,
    Change,
    decode_changes,
    lease_prefix,
    log_key,
    parse_lease_key,
    u64,
)

if TYPE_CHECKING:
    from schedd.store.rocksdb._live import LiveKeys

#: Changes of consecutive revisions, oldest first: (revision, changes).
Entries = list[tuple[int, list[Change]]]


def items(db: Rdict, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Stored (key, value) pairs in ``[lower, upper)``, in byte order."""
    options = ReadOptions()
    options.set_iterate_upper_bound(upper)
    pairs: Any = db.items(from_key=lower, read_opt=options)  # raw mode: bytes (stubs say any)
    for key, value in pairs:
        if key >= upper:  # the bound in ReadOptions stops RocksDB; this one stops us
            return
        yield key, value


def log_entries(db: Rdict, first: int, last: int, most: int) -> Entries:
    """The log's entries for revisions ``first..last`` (at most ``most``), oldest first."""
    out: Entries = []
    if first > last:
        return out
    for stored, data in items(db, log_key(first), log_key(last + 1)):
        out.append((int.from_bytes(stored[1:], "big"), decode_changes(data)))
        if len(out) >= most:
            break
    return out


def undo(kvs: list[KeyValue], later: Entries, start: bytes, end: bytes) -> list[KeyValue]:
    """``kvs`` (the keys in ``[start, end)`` now) as they were before the ``later`` changes."""
    if not later:
        return kvs
    state = {kv.key: kv for kv in kvs}
    for _, changes in reversed(later):
        for key, before, _after in reversed(changes):
            if not in_range(key, start, end):
                continue
            if before is None:
                state.pop(key, None)
            else:
                state[key] = before
    return [state[key] for key in sorted(state)]


def scan_at(
    live: LiveKeys, start: bytes, end: bytes, later: Entries, *, limit: int = 0
) -> list[KeyValue]:
    """The keys in ``[start, end)`` before the ``later`` changes (all those after a revision).

    Reads the live keys in spans and undoes the changes inside each span, so a ``limit`` is
    honoured without reading the whole range: returns at most ``limit + 1`` keys (the extra
    one says that there are more); values are kept (drop them after, for keys-only reads).
    """
    if not end:
        end = start + b"\x00"  # one key: the span of exactly it
    if not later:
        return live.scan(start, end, limit=limit + 1 if limit else 0)
    out: list[KeyValue] = []
    lower = start
    while True:
        want = limit + 1 - len(out) if limit else 0
        chunk = live.scan(lower, end, limit=want)
        done = not want or len(chunk) < want
        upper = end if done else chunk[-1].key + b"\x00"  # the span this chunk covers
        out += undo(chunk, later, lower, upper)
        if done or len(out) > limit:
            return out[: limit + 1] if limit else out
        lower = upper


def leases_with_keys(db: Rdict) -> list[int]:
    """Every lease that has a key attached, in id order (one seek per lease, not per key)."""
    found: list[int] = []
    lower = LEASED
    while True:
        first = next(items(db, lower, prefix_end(LEASED)), None)
        if first is None:
            return found
        lease, _ = parse_lease_key(first[0])
        found.append(lease)
        lower = LEASED + u64(lease + 1)


def leased_keys(db: Rdict, lease: int) -> list[bytes]:
    """The keys attached to ``lease``, in key order."""
    prefix = lease_prefix(lease)
    return [parse_lease_key(k)[1] for k, _ in items(db, prefix, prefix_end(prefix))]
