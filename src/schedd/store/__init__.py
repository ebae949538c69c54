"""The store: the key layout and every transaction, behind one contract (:mod:`schedd.store.abc`).

Everything outside this package imports from here, never from its underscore modules:

- the contract: :class:`KV` (a revisioned key-value store with etcd's semantics),
  :class:`OpBuilder`, :class:`TxnResult`, :class:`KeyValue`, watch types and errors;
- the backends, chosen by a store address (:func:`parse_store` gives a :class:`StoreConfig`,
  :func:`open_store` opens it): :class:`RocksKV` (``schedd.store.rocksdb``, durable on one
  machine), :func:`connect_etcd` with :class:`EtcdConfig` (``schedd.store.etcd``, a
  cluster), and :class:`MemoryKV` (``schedd.store.memory``) for simulations and tests;
- the layout: :class:`Keys` and the execution id helpers;
- the schedd transactions on top: :class:`PartitionStore` (a partition owner's fenced
  batches) and :class:`JobStore` (the client API's), with their records;
- encryption at rest: the :class:`Sealer` both stores seal secret fields with, the
  :class:`Keyring` it uses, the cluster's record of keys in use (:func:`prepare_keyring`,
  checked by every node at start) and :func:`rekey`.
"""

from schedd.model import (
    execution_from,
    execution_id,
    execution_template,
    new_execution,
    parse_execution_id,
)
from schedd.store._address import RocksConfig, StoreConfig, open_store, parse_store, store_address
from schedd.store._arrivals import OK as ARRIVED_OK
from schedd.store._arrivals import SKIP as ARRIVED_SKIP
from schedd.store._arrivals import Arrivals, Waiting
from schedd.store._deps import Graph
from schedd.store._envelope import EncryptionKey, Keyring, read_keyring_file
from schedd.store._group import Committed, GroupCommit
from schedd.store._jobs import JobStore
from schedd.store._keys import (
    DEFAULT_PREFIX,
    Keys,
    PartitionKeys,
    partition_of,
)
from schedd.store._keys_in_use import (
    KeysInUse,
    check_keyring,
    prepare_keyring,
    read_keys_in_use,
)
from schedd.store._metered import MeteredKV
from schedd.store._migrate import MigrateSummary, migrate_ids, needs_scoping
from schedd.store._notify import NOTIFY_MAX_IDS, Notice
from schedd.store._owner import Applied, Item, JobView, PartitionStore
from schedd.store._records import (
    FIRE,
    RUN,
    DueEntry,
    JobState,
    StoredJob,
    decode_execution,
    encode_execution,
)
from schedd.store._rekey import RekeySummary, rekey
from schedd.store._sealing import Sealer
from schedd.store._tenants import TenantStore, decode_limits, limits_by_tenant
from schedd.store._triggers import (
    TRIGGER_KEY_TTL_MS,
    Triggered,
    TriggerKey,
    expire_trigger_keys,
)
from schedd.store._types import (
    Fence,
    KeyValue,
    RevisionCompacted,
    StoreWrites,
    WatchBatch,
    WatchCompacted,
    WatchEvent,
    prefix_end,
)
from schedd.store.abc import (
    KV,
    Compare,
    KeyValueView,
    Op,
    OpBuilder,
    StoreFailed,
    TxnRejected,
    TxnResult,
)
from schedd.store.etcd import EtcdConfig, EtcdKV, connect_etcd
from schedd.store.memory import FaultPlan, MemoryKV
from schedd.store.rocksdb import RocksKV

__all__ = [
    "ARRIVED_OK",
    "ARRIVED_SKIP",
    "DEFAULT_PREFIX",
    "FIRE",
    "KV",
    "NOTIFY_MAX_IDS",
    "RUN",
    "TRIGGER_KEY_TTL_MS",
    "Applied",
    "Arrivals",
    "Committed",
    "Compare",
    "DueEntry",
    "EncryptionKey",
    "EtcdConfig",
    "EtcdKV",
    "FaultPlan",
    "Fence",
    "Graph",
    "GroupCommit",
    "Item",
    "JobState",
    "JobStore",
    "JobView",
    "KeyValue",
    "KeyValueView",
    "Keyring",
    "Keys",
    "KeysInUse",
    "MemoryKV",
    "MeteredKV",
    "MigrateSummary",
    "Notice",
    "Op",
    "OpBuilder",
    "PartitionKeys",
    "PartitionStore",
    "RekeySummary",
    "RevisionCompacted",
    "RocksConfig",
    "RocksKV",
    "Sealer",
    "StoreConfig",
    "StoreFailed",
    "StoreWrites",
    "StoredJob",
    "TenantStore",
    "TriggerKey",
    "Triggered",
    "TxnRejected",
    "TxnResult",
    "Waiting",
    "WatchBatch",
    "WatchCompacted",
    "WatchEvent",
    "check_keyring",
    "connect_etcd",
    "decode_execution",
    "decode_limits",
    "encode_execution",
    "execution_from",
    "execution_id",
    "execution_template",
    "expire_trigger_keys",
    "limits_by_tenant",
    "migrate_ids",
    "needs_scoping",
    "new_execution",
    "open_store",
    "parse_execution_id",
    "parse_store",
    "partition_of",
    "prefix_end",
    "prepare_keyring",
    "read_keyring_file",
    "read_keys_in_use",
    "rekey",
    "store_address",
]
