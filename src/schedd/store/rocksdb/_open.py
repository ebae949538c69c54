"""Opening a store directory: RocksDB's lock, the format marker, a fresh store's first keys."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rocksdict import Rdict, WriteBatch, WriteOptions

from schedd._errors import FailedPrecondition
from schedd._rocksdb import open_rocksdb
from schedd.store.rocksdb._layout import (
    COMPACTED_KEY,
    FORMAT_KEY,
    FORMAT_MARK,
    FORMAT_PREFIX,
    FORMAT_VERSION,
    LEASE_KEY,
    REVISION_KEY,
    parse_u64,
    u64,
)

#: The name :func:`schedd._rocksdb.open_rocksdb` gives the directory in its errors.
WHAT = "schedd store"
#: A fresh store starts at revision 1, like a fresh etcd; lease ids start here.
FIRST_REVISION = 1
FIRST_LEASE = 0x1000

#: An embedded store has one process: its node. What else needs it goes through that node.
IN_USE = (
    "an embedded store is held by one process at a time (a node on it is running, or still "
    "stopping): reach it through that node (schedctl), or stop the node first; a second node "
    "needs an etcd store (docs/operations.md, one machine to many)"
)


@dataclass(frozen=True)
class StoredMeta:
    """What a store directory says about itself when opened."""

    revision: int
    compacted: int
    next_lease: int
    created: bool = False  # the directory was new or empty: this open made the store


def open_store(path: Path) -> tuple[Rdict, StoredMeta]:
    """Opens (creating) the store at ``path``. Blocking: run it in a thread.

    Raises:
        FailedPrecondition: another process holds the directory; it is not a schedd store
            (a directory with other files, or a RocksDB without our marker); or a newer
            schedd wrote it. In each case nothing in it was changed.
    """
    if path.is_dir() and any(path.iterdir()) and not (path / "CURRENT").exists():
        if any(_rocksdb_file(p.name) for p in path.iterdir()):
            raise FailedPrecondition(
                f"the {WHAT} at {path} is damaged: RocksDB's files are there but its CURRENT "
                "file is not; restore the directory from a backup (nothing was changed)"
            )
        raise FailedPrecondition(
            f"{path} is not a {WHAT}: it holds other files and no RocksDB; use an empty or new dir"
        )
    db = open_rocksdb(path, WHAT, IN_USE)
    try:
        return db, _read_meta(db, path)
    except BaseException:
        db.close()
        raise


def _rocksdb_file(name: str) -> bool:
    """Whether a file name is one RocksDB writes in its directory."""
    return name.startswith(("MANIFEST-", "OPTIONS-")) or name.endswith((".sst", ".log"))


def _read_meta(db: Rdict, path: Path) -> StoredMeta:
    mark: bytes | None = db.get(FORMAT_KEY)
    if mark is None:
        if next(iter(db.keys()), None) is not None:
            raise FailedPrecondition(
                f"{path} is not a {WHAT}: a RocksDB without the schedd format marker"
            )
        return _initialise(db)
    if not mark.startswith(FORMAT_PREFIX) or not mark[len(FORMAT_PREFIX) :].isdigit():
        raise FailedPrecondition(f"{path} is not a {WHAT}: unknown format marker {mark!r}")
    version = int(mark[len(FORMAT_PREFIX) :])
    if version > FORMAT_VERSION:
        raise FailedPrecondition(
            f"the {WHAT} at {path} has format {version}, newer than this schedd reads "
            f"({FORMAT_VERSION}): run a newer schedd on it"
        )
    return StoredMeta(
        revision=_number(db, REVISION_KEY, path),
        compacted=_number(db, COMPACTED_KEY, path),
        next_lease=_number(db, LEASE_KEY, path),
    )


def _number(db: Rdict, key: bytes, path: Path) -> int:
    data: bytes | None = db.get(key)
    if data is None or len(data) != 8:
        raise FailedPrecondition(f"the {WHAT} at {path} is damaged: its {key[1:]!r} is {data!r}")
    return parse_u64(data)


def _initialise(db: Rdict) -> StoredMeta:
    meta = StoredMeta(FIRST_REVISION, 0, FIRST_LEASE, created=True)
    batch = WriteBatch(raw_mode=True)
    batch.put(FORMAT_KEY, FORMAT_MARK)
    batch.put(REVISION_KEY, u64(meta.revision))
    batch.put(COMPACTED_KEY, u64(meta.compacted))
    batch.put(LEASE_KEY, u64(meta.next_lease))
    synced = WriteOptions()
    synced.sync = True
    db.write(batch, synced)
    return meta
