"""The rocksdb backend's live keys, decoded and held in memory.

Every transaction is evaluated, and every read at the current revision answered, from this
mirror of the database's ``k`` records: a dict lookup per key instead of a RocksDB read and
a record decode. Ranges walk the database's keys (RocksDB keeps them in order) and take
each key's record from the mirror. RocksDB stays the durable copy, written in the same step
as the mirror (see :meth:`RocksKV._apply`); the mirror is loaded from it when the store
opens, and costs memory in proportion to the live data (keys and values), as etcd's index
and page cache do.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from rocksdict import Rdict, ReadOptions

from schedd.store._tuple_ops import TO_END
from schedd.store._types import KeyValue, prefix_end
from schedd.store.rocksdb._layout import LIVE, decode_record, live_key
from schedd.store.rocksdb._reads import items

_LIVE_END = prefix_end(LIVE)


class LiveKeys:
    """Key -> :class:`KeyValue` of the applied state (``end`` follows etcd: ``b""`` is the
    key ``start`` alone, ``b"\\x00"`` is every key from ``start``)."""

    __slots__ = ("_db", "_keys")

    def __init__(self, db: Rdict, kvs: dict[bytes, KeyValue]) -> None:
        self._db = db
        self._keys = kvs

    @classmethod
    def load(cls, db: Rdict) -> LiveKeys:
        """Every live key of ``db``. Blocking (it reads them all): run it in a thread."""
        kvs = {}
        for stored, data in items(db, LIVE, _LIVE_END):
            key = stored[1:]
            kvs[key] = decode_record(key, data)
        return cls(db, kvs)

    def __len__(self) -> int:
        return len(self._keys)

    def get(self, key: bytes) -> KeyValue | None:
        return self._keys.get(key)

    def scan(self, start: bytes, end: bytes, *, limit: int = 0) -> list[KeyValue]:
        """The keys in ``[start, end)``, in key order; with ``limit``, at most that many."""
        if not end:
            kv = self._keys.get(start)
            return [] if kv is None else [kv]
        keys, out = self._keys, []
        for key in self._ordered(start, end):
            out.append(keys[key])
            if limit and len(out) >= limit:
                break
        return out

    def count(self, start: bytes, end: bytes) -> int:
        if not end:
            return 1 if start in self._keys else 0
        return sum(1 for _ in self._ordered(start, end))

    def apply(self, after: Mapping[bytes, KeyValue | None]) -> None:
        """Takes one revision's writes (each key's record after it; None: deleted), once
        they are in the database."""
        keys = self._keys
        for key, kv in after.items():
            if kv is None:
                keys.pop(key, None)
            else:
                keys[key] = kv

    def _ordered(self, start: bytes, end: bytes) -> Iterator[bytes]:
        """The live keys in ``[start, end)`` in byte order, from the database's index."""
        upper = _LIVE_END if end == TO_END else live_key(end)
        options = ReadOptions()
        options.set_iterate_upper_bound(upper)
        stored_keys: Any = self._db.keys(from_key=live_key(start), read_opt=options)
        for stored in stored_keys:
            if stored >= upper:
                return
            yield stored[1:]
