"""Reads of the rocksdb backend's layout, from the database or from a snapshot of it.

Every function here is synchronous and does work proportional to what it returns (or, for a
read in the past, to the changes since): callers on the event loop keep them bounded.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol

from rocksdict import Rdict, ReadOptions, Snapshot

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


class Source(Protocol):
    """Where reads come from: the database as of now, or a snapshot of it."""

    def get(self, stored_key: bytes) -> bytes | None: ...

    def items(self, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Stored (key, value) pairs in ``[lower, upper)``, in byte order."""
        ...


def _bounded(pairs: Iterable[tuple[Any, Any]], upper: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Raw mode gives bytes; rocksdict's stubs type them for every mode."""
    for key, value in pairs:
        if key >= upper:  # the bound in ReadOptions stops RocksDB; this one stops us
            return
        yield key, value


def _read_options(upper: bytes) -> ReadOptions:
    options = ReadOptions()
    options.set_iterate_upper_bound(upper)
    return options


class DbSource:
    """Reads the database as of now (for writers: the applied state)."""

    def __init__(self, db: Rdict) -> None:
        self._db = db

    def get(self, stored_key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(stored_key)
        return value

    def items(self, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
        return _bounded(self._db.items(from_key=lower, read_opt=_read_options(upper)), upper)


class SnapshotSource:
    """Reads a RocksDB snapshot: the state as of the moment it was taken."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def get(self, stored_key: bytes) -> bytes | None:
        for _, value in self.items(stored_key, stored_key + b"\x00"):
            return value
        return None

    def items(self, lower: bytes, upper: bytes) -> Iterator[tuple[bytes, bytes]]:
        pairs = self._snapshot.items(from_key=lower, read_opt=_read_options(upper))
        return _bounded(pairs, upper)


def get_kv(source: Source, key: bytes, *, keys_only: bool = False) -> KeyValue | None:
    data = source.get(live_key(key))
    return None if data is None else decode_record(key, data, keys_only=keys_only)


def _live_items(source: Source, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
    upper = _LIVE_END if end == TO_END else live_key(end)
    return source.items(live_key(start), upper)


def scan(
    source: Source, start: bytes, end: bytes, *, limit: int = 0, keys_only: bool = False
) -> list[KeyValue]:
    """The keys in ``[start, end)`` as of the source (``end == b""``: the key ``start``).

    With ``limit``, at most that many (ask for one more to learn whether there are more).
    """
    if not end:
        kv = get_kv(source, start, keys_only=keys_only)
        return [] if kv is None else [kv]
    out: list[KeyValue] = []
    for stored, data in _live_items(source, start, end):
        out.append(decode_record(stored[1:], data, keys_only=keys_only))
        if limit and len(out) >= limit:
            break
    return out


def count(source: Source, start: bytes, end: bytes) -> int:
    if not end:
        return 0 if source.get(live_key(start)) is None else 1
    return sum(1 for _ in _live_items(source, start, end))


def log_entries(source: Source, first: int, last: int, most: int) -> list[tuple[int, list[Change]]]:
    """The log's entries for revisions ``first..last`` (at most ``most`` of them), in order.

    A revision that changed nothing has no entry (only compaction leaves gaps before it).
    """
    out: list[tuple[int, list[Change]]] = []
    if first > last:
        return out
    for stored, data in source.items(log_key(first), log_key(last + 1)):
        out.append((int.from_bytes(stored[1:], "big"), decode_changes(data)))
        if len(out) >= most:
            break
    return out


def scan_as_of(
    source: Source, start: bytes, end: bytes, revision: int, current: int
) -> list[KeyValue]:
    """The keys in ``[start, end)`` as of ``revision``, from the state at ``current``.

    Undoes the changes of every later revision, newest first, with the records they
    replaced: costs the keys in the range plus the changes since ``revision``.
    """
    state = {kv.key: kv for kv in scan(source, start, end)}
    undo = log_entries(source, revision + 1, current, most=current - revision)
    for _, changes in reversed(undo):
        for key, before, _after in reversed(changes):
            if not in_range(key, start, end):
                continue
            if before is None:
                state.pop(key, None)
            else:
                state[key] = before
    return [state[key] for key in sorted(state)]


def leases_with_keys(source: Source) -> list[int]:
    """Every lease that has a key attached, in id order (one seek per lease, not per key)."""
    found: list[int] = []
    lower = LEASED
    while True:
        first = next(source.items(lower, prefix_end(LEASED)), None)
        if first is None:
            return found
        lease, _ = parse_lease_key(first[0])
        found.append(lease)
        lower = LEASED + u64(lease + 1)


def leased_keys(source: Source, lease: int) -> list[bytes]:
    """The keys attached to ``lease``, in key order."""
    prefix = lease_prefix(lease)
    return [parse_lease_key(k)[1] for k, _ in source.items(prefix, prefix_end(prefix))]
