"""The embedded RocksDB backend of the store contract: one process, durable, no etcd."""

from schedd.store.rocksdb._kv import RocksKV
from schedd.store.rocksdb._layout import FORMAT_VERSION

__all__ = ["FORMAT_VERSION", "RocksKV"]
