"""How the rocksdb backend lays the store out in one RocksDB: raw bytes, one column family.

==========================================  ===============================================
key                                         value
==========================================  ===============================================
``m`` + ``format``                          :data:`FORMAT_MARK` (what wrote the directory)
``m`` + ``revision``                        the store's revision (u64 big-endian)
``m`` + ``compacted``                       the last compaction's revision (u64)
``m`` + ``lease``                           the next lease id (u64)
``k`` + key                                 the key as of now: create, mod, version, lease
                                            (4 x u64) then the value
``h`` + revision (u64)                      that revision's changes: per key, its record
                                            before and after (the log for reads in the
                                            past and watches; compaction deletes its head)
``x`` + lease (u64) + key                   the key is attached to the lease (so a lease
                                            ends without a scan of every key)
==========================================  ===============================================

Big-endian numbers make byte order numeric order, so the log is a range in revision order
and ``k`` + the caller's key keeps the caller's byte order.
"""

from __future__ import annotations

import struct

from schedd.store._types import KeyValue

LIVE = b"k"
LOG = b"h"
LEASED = b"x"
FORMAT_KEY = b"mformat"
REVISION_KEY = b"mrevision"
COMPACTED_KEY = b"mcompacted"
LEASE_KEY = b"mlease"

#: This code's on-disk format; a directory marked with a higher one is refused.
FORMAT_VERSION = 1
#: The format marker's value is this prefix and the version in decimal.
FORMAT_PREFIX = b"schedd-kv/"
FORMAT_MARK = FORMAT_PREFIX + str(FORMAT_VERSION).encode()

_U64 = struct.Struct(">Q")
_RECORD = struct.Struct(">QQQQ")  # create, mod, version, lease
_CHANGE = struct.Struct(">IB")  # key length, which records follow (bit 0: before, 1: after)
_LEN = struct.Struct(">I")
_ABSENT = 0

#: A change of one key in one revision: (key, before, after); None where it was absent.
Change = tuple[bytes, KeyValue | None, KeyValue | None]


def u64(n: int) -> bytes:
    return _U64.pack(n)


def parse_u64(data: bytes) -> int:
    value: int = _U64.unpack(data)[0]
    return value


def live_key(key: bytes) -> bytes:
    return LIVE + key


def log_key(revision: int) -> bytes:
    return LOG + _U64.pack(revision)


def lease_prefix(lease: int) -> bytes:
    return LEASED + _U64.pack(lease)


def lease_key(lease: int, key: bytes) -> bytes:
    return LEASED + _U64.pack(lease) + key


def parse_lease_key(stored: bytes) -> tuple[int, bytes]:
    """(lease, key) of an ``x`` key."""
    return parse_u64(stored[1:9]), stored[9:]


def encode_record(kv: KeyValue) -> bytes:
    return _RECORD.pack(kv.create_revision, kv.mod_revision, kv.version, kv.lease) + kv.value


def decode_record(key: bytes, data: bytes, *, keys_only: bool = False) -> KeyValue:
    create, mod, version, lease = _RECORD.unpack_from(data)
    value = b"" if keys_only else bytes(data[_RECORD.size :])
    return KeyValue(key, value, create, mod, version, lease)


def encode_changes(changes: list[Change]) -> bytes:
    """One log entry: every change of its revision, in the order they were made."""
    out = bytearray()
    for key, before, after in changes:
        flags = (1 if before is not None else 0) | (2 if after is not None else 0)
        out += _CHANGE.pack(len(key), flags)
        out += key
        for kv in (before, after):
            if kv is not None:
                record = encode_record(kv)
                out += _LEN.pack(len(record))
                out += record
    return bytes(out)


def decode_changes(data: bytes) -> list[Change]:
    """The inverse of :func:`encode_changes`."""
    out: list[Change] = []
    view, at = memoryview(data), 0
    while at < len(view):
        size, flags = _CHANGE.unpack_from(view, at)
        at += _CHANGE.size
        key = bytes(view[at : at + size])
        at += size
        records: list[KeyValue | None] = []
        for bit in (1, 2):
            if not flags & bit:
                records.append(None)
                continue
            (length,) = _LEN.unpack_from(view, at)
            at += _LEN.size
            records.append(decode_record(key, bytes(view[at : at + length])))
            at += length
        out.append((key, records[0], records[1]))
    return out
