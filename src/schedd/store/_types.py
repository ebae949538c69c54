"""The store's data types, shared by the contract and every backend (no backend imports)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

from schedd._errors import Unavailable


class KeyValue(NamedTuple):
    """One key as stored (a named tuple: made for every key read, so it is cheap to make).

    Attributes:
        key: the key.
        value: its value (empty with ``keys_only`` reads and in delete events).
        create_revision: revision of the write that created the key (0 in delete events).
        mod_revision: revision of its last write (in a delete event: of the delete).
        version: writes since creation, 1 after creation (0 in delete events); it restarts
            at 1 when the key is deleted and created again.
        lease: id of the lease the key is attached to, 0 for none.
    """

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int = 0


@dataclass
class StoreWrites:
    """What a store process has written since it opened the store (counted by the backends
    that write themselves; etcd counts its own, in its metrics).

    Attributes:
        keys: keys created, changed or deleted.
        bytes: bytes handed to the store's write-ahead log (keys, values and the store's own
            records: the change log, the lease index, the revision).
    """

    keys: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class WatchEvent:
    """One change: ``kind`` is ``"put"`` or ``"delete"``; ``kv.value`` is empty on delete."""

    kind: Literal["put", "delete"] | str
    kv: KeyValue


@dataclass
class WatchBatch:
    """Changes delivered together, in revision order; ``revision`` is at least the last one's."""

    revision: int
    events: list[WatchEvent] = field(default_factory=list)


@dataclass(frozen=True)
class Fence:
    """Proof of ownership of one partition at one epoch: a value the store adds to writes.

    The epoch is the create revision of ``owners/{partition}``: it changes (and only grows)
    whenever the key is created anew, so a write that carries :meth:`compare` succeeds only
    while this exact ownership lasts. A zombie owner whose lease expired, or an owner that
    released the partition, fails the compare even if it does not know it lost the partition.

    Attributes:
        partition: the partition number.
        key: the key ``owners/{partition}``.
        epoch: create revision of ``key`` when this node claimed it.
    """

    partition: int
    key: bytes
    epoch: int

    def compare(self, ops: _CmpBuilder) -> object:
        """A compare (made by ``ops``, a backend's op builder) that holds iff the owner key
        still has this create revision.

        Add it to the compares of every transaction that must only apply while this node
        owns the partition; a failed transaction means :class:`schedd.FencedOut`.
        """
        return ops.cmp_create(self.key, self.epoch)


class _CmpBuilder(Protocol):
    def cmp_create(self, key: bytes, create_revision: int) -> object: ...


class WatchCompacted(Exception):
    """The watch's start revision was compacted away: re-list, then watch from list rev + 1."""

    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"watch start revision compacted (compact revision {compact_revision})")
        self.compact_revision = compact_revision


class RevisionCompacted(Unavailable):
    """A read asked for a revision older than the last compaction: read at a newer one."""


def prefix_end(prefix: bytes) -> bytes:
    """The range end that covers every key starting with ``prefix`` (etcd's rule).

    The last byte below 0xff is incremented and what follows it dropped; a prefix of only
    0xff bytes (or empty) gives ``b"\\x00"``, which a range reads as "to the end of keys".

    >>> prefix_end(b"a/")
    b'a0'
    """
    end = bytearray(prefix)
    for i in range(len(end) - 1, -1, -1):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\x00"
