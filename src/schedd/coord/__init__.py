"""Coordination: sessions, membership, partition ownership and fencing.

Layered like etcd's ``concurrency`` package: a :class:`Session` (a lease kept alive, with
``done``) carries the node's :class:`Membership` record and its partition claims; a
:class:`PartitionOwnership` keeps the node's fair share of partitions; each owned partition
comes with a :class:`Fence` (a value of the store's) whose :meth:`Fence.compare` the store
adds to every guarded write. Typical wiring::

    kv = await connect_etcd(EtcdConfig())   # or MemoryKV(clock=...) in a simulation
    meta = await init_cluster(kv, keys, partitions=64)
    session = Session(kv, ttl_s=5)
    await session.start()
    members = Membership(kv, keys, session, info, clock=SystemClock())
    await members.start()
    owner = PartitionOwnership(kv, keys, session, members, OwnershipConfig(meta.partitions),
                               on_acquired=start_partition, on_lost=stop_partition)
    owner.start()
    await owner.wait()         # returns when the session is lost, or after owner.stop()
    ...
    await owner.stop(graceful=True, timeout=5)   # partitions released, keys deleted
    await members.stop()
    await session.stop()       # the lease revoked

Every part speaks the lifecycle of the rest of schedd: ``start()``, then
``stop(graceful=True, timeout=None)`` (not graceful: nothing is given back or deleted; the
session lease takes the keys with it when it expires).
"""

from schedd.coord._membership import Membership, NodeInfo
from schedd.coord._meta import (
    FORMAT_VERSION,
    ClusterMeta,
    check_format,
    init_cluster,
    read_cluster,
    write_format,
)
from schedd.coord._mirror import PrefixMirror
from schedd.coord._ownership import (
    OwnershipConfig,
    PartitionOwnership,
    preference_order,
    rendezvous_score,
)
from schedd.coord._session import Session
from schedd.store import Fence

__all__ = [
    "FORMAT_VERSION",
    "ClusterMeta",
    "Fence",
    "Membership",
    "NodeInfo",
    "OwnershipConfig",
    "PartitionOwnership",
    "PrefixMirror",
    "Session",
    "check_format",
    "init_cluster",
    "preference_order",
    "read_cluster",
    "rendezvous_score",
    "write_format",
]
