"""Where the store is: one address picks the backend, for every command that opens one.

Two kinds of store, one contract (:mod:`schedd.store.abc`)::

    rocksdb:/var/lib/schedd/store     the embedded store: one machine, one node, no etcd
    etcd://10.0.0.1:2379,10.0.0.2:2379  an etcd cluster (several nodes)
    10.0.0.1:2379,10.0.0.2:2379       the same (what ``--etcd`` has always taken)

``schedd node --store``, ``schedd token create``, ``schedd keys rekey`` and ``schedd dev``
read it from ``--store`` or ``SCHEDD_STORE``; :func:`parse_store` turns it into a
:class:`StoreConfig`, and :func:`open_store` opens it. Nothing else in schedd names a
backend.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeAlias

from schedd._clock import Clock
from schedd.store.abc import KV
from schedd.store.etcd import EtcdConfig, connect_etcd
from schedd.store.rocksdb import RocksKV

ROCKSDB, ETCD = "rocksdb", "etcd"


@dataclass(frozen=True)
class RocksConfig:
    """The embedded store in one directory, held by one process at a time.

    Attributes:
        path: the store's directory (created when missing).
    """

    path: Path

    @property
    def address(self) -> str:
        return f"{ROCKSDB}:{self.path}"


#: What :func:`parse_store` returns: which backend, and how to reach it.
StoreConfig: TypeAlias = EtcdConfig | RocksConfig


def store_address(config: StoreConfig) -> str:
    """The address ``config`` was parsed from, for messages (``rocksdb:/x``, ``etcd://h:p``)."""
    if isinstance(config, RocksConfig):
        return config.address
    return f"{ETCD}://" + ",".join(config.endpoints)


def parse_store(text: str, etcd: EtcdConfig | None = None) -> StoreConfig:
    """The store at ``text`` (see the module docstring).

    Args:
        text: ``rocksdb:PATH``, ``etcd://HOST:PORT[,...]`` or ``HOST:PORT[,...]``.
        etcd: settings an etcd store takes besides its endpoints (TLS, timeouts).

    Raises:
        ValueError: an empty or unknown address, a ``rocksdb:`` without a path, a bad
            endpoint; the message says which forms are understood.
    """
    text = text.strip()
    scheme, sep, rest = text.partition(":")
    if sep and scheme == ROCKSDB:
        path = rest[2:] if rest.startswith("//") else rest
        if not path:
            raise ValueError("rocksdb: needs the store's directory, e.g. rocksdb:/var/lib/schedd")
        return RocksConfig(Path(path).expanduser())
    if text.startswith(f"{ETCD}://"):
        text = text[len(f"{ETCD}://") :]
    elif sep and rest.startswith("//"):
        raise ValueError(
            f"unknown store {scheme!r}: use rocksdb:PATH or etcd://HOST:PORT[,HOST:PORT...]"
        )
    if not text:
        raise ValueError("no store given: use rocksdb:PATH or etcd://HOST:PORT[,HOST:PORT...]")
    endpoints = EtcdConfig.parse_endpoints(text)
    return replace(etcd or EtcdConfig(), endpoints=endpoints)


async def open_store(config: StoreConfig, *, clock: Clock | None = None) -> KV:
    """Opens the store ``config`` names; the caller closes it.

    Raises:
        FailedPrecondition: an embedded store's directory is held by another process, is
            not a schedd store, or was written by a newer schedd.
        Unavailable: etcd cannot be reached.
    """
    if isinstance(config, RocksConfig):
        return await RocksKV.open(config.path, clock=clock)
    return await connect_etcd(config)
