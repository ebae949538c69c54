"""Reads of the rocksdb backend's layout: the state as of now, or as of a revision before it.

The database holds the applied state (every batch written, synced or not). A read at an
older revision, including the last synced one while a sync is under way, starts from it and
undoes the changes of every later revision with the records they replaced (:func:`scan_at`).
(RocksDB snapshots would do it too, but rocksdict's snapshot iterators read the live
database, 0.3.29: only ``snapshot[key]`` honours the snapshot.)

Every function is synchronous and does work proportional to what it returns plus the
changes it undoes: callers on the event loop keep both bounded.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rocksdict import Rdict, ReadOptions

from schedd.store._tuple_ops import TO_END, in_range
from schedd.store._types import KeyValue, prefix_end
from schedd.store.rocksdb._layout import (
    LEASED,
    LIVE,
    Change,
    decode_changes,
    decode_record,
    lease_prefix,
    live_key,
    log_key,
    parse_lease_key,
    u64,
)

_LIVE_END = prefix_end(LIVE)

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


def get_kv(db: Rdict, key: bytes, *, keys_only: bool = False) -> KeyValue | None:
    data: bytes | None = db.get(live_key(key))
    return None if data is None else decode_record(key, data, keys_only=keys_only)


def _live_items(db: Rdict, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
    upper = _LIVE_END if end == TO_END else live_key(end)
    return items(db, live_key(start), upper)


def scan(
    db: Rdict, start: bytes, end: bytes, *, limit: int = 0, keys_only: bool = False
) -> list[KeyValue]:
    """The keys in ``[start, end)`` as of now (``end == b""``: the key ``start``).

    With ``limit``, at most that many (ask for one more to learn whether there are more).
    """
    if not end:
        kv = get_kv(db, start, keys_only=keys_only)
        return [] if kv is None else [kv]
    out: list[KeyValue] = []
    for stored, data in _live_items(db, start, end):
        out.append(decode_record(stored[1:], data, keys_only=keys_only))
        if limit and len(out) >= limit:
            break
    return out


def count(db: Rdict, start: bytes, end: bytes) -> int:
    if not end:
        return 0 if db.get(live_key(start)) is None else 1
    return sum(1 for _ in _live_items(db, start, end))


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
    db: Rdict, start: bytes, end: bytes, later: Entries, *, limit: int = 0
) -> list[KeyValue]:
    """The keys in ``[start, end)`` before the ``later`` changes (all those after a revision).

    Reads the live keys in spans and undoes the changes inside each span, so a ``limit`` is
    honoured without reading the whole range: returns at most ``limit + 1`` keys (the extra
    one says that there are more); values are kept (drop them after, for keys-only reads).
    """
    if not end:
        end = start + b"\x00"  # one key: the span of exactly it
    if not later:
        return scan(db, start, end, limit=limit + 1 if limit else 0)
    out: list[KeyValue] = []
    lower = start
    while True:
        want = limit + 1 - len(out) if limit else 0
        chunk = scan(db, lower, end, limit=want)
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
