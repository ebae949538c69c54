"""The cluster's immutable facts: partition count and format version, written once."""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass

from schedd._errors import FailedPrecondition, InvalidArgument
from schedd.store import KV, Keys

log = logging.getLogger(__name__)

#: The layout version this code writes and understands. What each version changed (the
#: message that names an older store's format says it):
#: 2: job ids scoped by tenant (``acme:nightly``); ``schedd store migrate`` renames jobs.
FORMAT_VERSION = 2
FORMAT_CHANGES = {2: "job ids scoped by tenant"}
#: Owner keys are zero-padded to 4 digits, so key order is partition order up to this.
MAX_PARTITIONS = 9999


@dataclass
class ClusterMeta:
    """What ``meta/cluster`` holds.

    Attributes:
        partitions: partition count P; fixed for the life of the cluster.
        format_version: key layout version.
        cluster_id: random id chosen by whoever initialised the cluster.
    """

    partitions: int
    format_version: int
    cluster_id: str

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "partitions": self.partitions,
                "format_version": self.format_version,
                "cluster_id": self.cluster_id,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ClusterMeta:
        """Parses a stored value. Raises FailedPrecondition when it is not valid meta."""
        try:
            data = json.loads(raw)
            return cls(
                partitions=int(data["partitions"]),
                format_version=int(data["format_version"]),
                cluster_id=str(data["cluster_id"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise FailedPrecondition(f"meta/cluster is not valid cluster meta: {raw!r}") from exc


async def init_cluster(kv: KV, keys: Keys, partitions: int) -> ClusterMeta:
    """Creates ``meta/cluster`` if absent; returns what is stored.

    One create-if-absent transaction, so concurrent initialisers agree on one meta. The
    partition count never changes silently: if the stored P differs from ``partitions``,
    a warning is logged and the *stored* meta is returned; the caller decides what to do.

    Raises:
        InvalidArgument: ``partitions`` is outside 1..9999.
        FailedPrecondition: the stored value is not valid meta.
        Unavailable: etcd cannot be reached.
    """
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise InvalidArgument("partitions", f"must be in 1..{MAX_PARTITIONS}, got {partitions}")
    key = keys.meta_key()
    meta = ClusterMeta(partitions, FORMAT_VERSION, uuid.uuid4().hex)
    ops = kv.ops
    resp = await kv.txn([ops.cmp_create(key, 0)], [ops.put(key, meta.to_json())], [ops.get(key)])
    if resp.succeeded:
        log.info("cluster initialised id=%s partitions=%d", meta.cluster_id, partitions)
        return meta
    kvs = resp.kvs(0)
    if not kvs:  # deleted between compare and get cannot happen inside one txn
        raise FailedPrecondition("meta/cluster vanished during init")
    stored = ClusterMeta.from_json(kvs[0].value)
    if stored.partitions != partitions:
        log.warning(
            "cluster %s has %d partitions; requested %d ignored (P never changes)",
            stored.cluster_id,
            stored.partitions,
            partitions,
        )
    return stored


def check_format(meta: ClusterMeta) -> None:
    """Refuses a store of another format than this code's.

    Raises:
        FailedPrecondition: an older format (naming it and ``schedd store migrate``), or a
            newer one (a newer schedd wrote it).
    """
    have = meta.format_version
    if have < FORMAT_VERSION:
        changes = ", ".join(FORMAT_CHANGES[v] for v in range(have + 1, FORMAT_VERSION + 1))
        raise FailedPrecondition(
            f"the store holds cluster format {have}; this schedd needs format {FORMAT_VERSION}"
            f" ({changes}): stop every node and run 'schedd store migrate' with the same"
            " store flags"
        )
    if have > FORMAT_VERSION:
        raise FailedPrecondition(
            f"the store holds cluster format {have}, newer than this schedd's"
            f" ({FORMAT_VERSION}): run a newer schedd"
        )


async def write_format(kv: KV, keys: Keys, version: int) -> ClusterMeta:
    """Sets the cluster's format version (compared on the meta's revision).

    Raises:
        FailedPrecondition: no cluster, or its meta changed meanwhile.
    """
    key = keys.meta_key()
    found = await kv.get(key)
    if found is None:
        raise FailedPrecondition("no cluster under this prefix (meta/cluster is absent)")
    meta = ClusterMeta.from_json(found.value)
    meta.format_version = version
    ops = kv.ops
    resp = await kv.txn([ops.cmp_mod(key, found.mod_revision)], [ops.put(key, meta.to_json())])
    if not resp.succeeded:
        raise FailedPrecondition("meta/cluster changed during the migration; run it again")
    return meta


async def read_cluster(kv: KV, keys: Keys) -> ClusterMeta | None:
    """The stored meta, or None when the cluster was never initialised."""
    found = await kv.get(keys.meta_key())
    return None if found is None else ClusterMeta.from_json(found.value)
