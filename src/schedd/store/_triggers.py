"""Manual triggers, and their idempotency keys: ``tidem/{tenant}/{job}/{key}``.

A trigger creates one PENDING execution, due now, at the first free scheduled time from now
on (two triggers in one millisecond take the next one). With an idempotency key, the key's
record (:class:`TriggerKey`: the execution id, when it was made, the payload's digest) is
created **in the same transaction** as the run: either both are written or neither is. A
later trigger of the job with that key finds the record and creates nothing; with another
payload it is refused (ALREADY_EXISTS).

A record lives :data:`TRIGGER_KEY_TTL_MS` (24 h). Past that, a trigger with the key treats it
as absent (the new record replaces it, compared on its mod revision), and
:func:`expire_trigger_keys`, run by one node of the cluster on a timer, deletes expired
records a page at a time, each compared on its mod revision (a record rewritten meanwhile
stays). Deleting a job deletes its records (``JobStore.delete_job``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from schedd._errors import AlreadyExists, Conflict, SchedError
from schedd.model import new_execution
from schedd.store._keys import Keys
from schedd.store._notify import notify_ops
from schedd.store._records import new_run
from schedd.store._sealing import Sealer
from schedd.store._types import prefix_end
from schedd.store.abc import KV, Compare
from schedd.v1 import execution_pb2, job_pb2

#: How long a trigger's idempotency key is remembered (docs/architecture.md).
TRIGGER_KEY_TTL_MS = 24 * 3600 * 1000
#: Records read (and deleted, each a nested compare and delete) per transaction of the sweep:
#: 128 operations, etcd's default ``--max-txn-ops``.
EXPIRE_PAGE = 64
#: How many scheduled times after now a trigger tries before giving up.
TRIGGER_SLOTS = 1000


@dataclass(frozen=True)
class TriggerKey:
    """The value of ``tidem/{tenant}/{job}/{key}``."""

    execution_id: str
    created_ms: int
    payload_digest: str

    def encode(self) -> bytes:
        doc = {"execution": self.execution_id, "at": self.created_ms}
        doc["payload"] = self.payload_digest
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> TriggerKey:
        """The record; one that does not decode reads as created at 0 (long expired)."""
        try:
            doc = json.loads(raw)
            return cls(str(doc["execution"]), int(doc["at"]), str(doc["payload"]))
        except (ValueError, KeyError, TypeError):
            return cls("", 0, "")

    def expired(self, now_ms: int, ttl_ms: int) -> bool:
        return now_ms >= self.created_ms + ttl_ms


def payload_digest(job_id: str, payload: bytes) -> str:
    """What a record keeps of the payload: enough to tell another payload, salted with the job
    id so equal payloads of two jobs do not read alike."""
    h = hashlib.sha256(job_id.encode() + b"\0")
    h.update(payload)
    return h.hexdigest()


@dataclass(frozen=True)
class Triggered:
    """What a trigger did: ``created`` the execution it made, or None when its idempotency
    key had made ``execution_id`` already (nothing was created)."""

    execution_id: str
    created: execution_pb2.Execution | None


class Triggers:
    """The trigger transactions (``JobStore.trigger``)."""

    def __init__(
        self, kv: KV, keys: Keys, partition_of: Callable[[str], int], sealer: Sealer
    ) -> None:
        self.kv = kv
        self.keys = keys
        self.partition_of = partition_of
        self.sealer = sealer

    async def trigger(
        self,
        job: job_pb2.Job,
        now_ms: int,
        *,
        payload: bytes = b"",
        idempotency_key: str = "",
        ttl_ms: int = TRIGGER_KEY_TTL_MS,
    ) -> Triggered:
        """Creates one execution of ``job`` due now, unless ``idempotency_key`` made one less
        than ``ttl_ms`` ago (then that one's id is returned and nothing is written).

        Raises:
            AlreadyExists: the key made an execution with another payload.
            Conflict: the job changed meanwhile (its version is compared).
        """
        k, o = self.keys, self.kv.ops
        p = self.partition_of(job.id)
        tkey = k.trigger_idem_key(job.tenant, job.id, idempotency_key) if idempotency_key else b""
        digest = payload_digest(job.id, payload)
        sched = now_ms
        for _ in range(2 * TRIGGER_SLOTS):
            if sched >= now_ms + TRIGGER_SLOTS:
                break
            key_cmps: list[Compare] = []
            if tkey:
                found = await self._held(tkey, idempotency_key, digest, now_ms, ttl_ms)
                if isinstance(found, Triggered):
                    return found
                key_cmps.append(found)
            ex = new_execution(job, p, sched, now_ms, execution_pb2.TRIGGER_MANUAL)
            if payload:
                ex.payload_override = payload
                ex.has_payload_override = True
            run = new_run(o, k, ex, self.sealer.execution_value(ex))
            cmps, ops = [*run.compares, *key_cmps], list(run.ops)
            if tkey:
                ops.append(o.put(tkey, TriggerKey(ex.id, now_ms, digest).encode()))
            guard = [o.cmp_mod(k.job_key(job.id), job.version)]
            resp = await self.kv.txn(guard, [o.txn(cmps, ops), *notify_ops(o, k, {p: [job.id]})])
            if not resp.succeeded:
                raise Conflict(f"job {job.id!r} changed meanwhile; retry")
            if resp.txn_succeeded(0):
                ex.fencing_token = resp.revision
                return Triggered(ex.id, ex)
            # The time is taken (try the next) or the key was written meanwhile (read again).
            if not tkey or await self._slot_taken(run.run_key, run.due_key):
                sched += 1
        raise SchedError(f"job {job.id!r}: could not find a free trigger slot")

    async def _held(
        self, tkey: bytes, idempotency_key: str, digest: str, now_ms: int, ttl_ms: int
    ) -> Triggered | Compare:
        """What the key's record says: the execution it made (its lifetime not over), or the
        compare a new record is written under (absent; or expired, not swept yet: replaced if
        it is still the one read).

        Raises:
            AlreadyExists: the record is for another payload.
        """
        o = self.kv.ops
        held = await self.kv.get(tkey)
        if held is None:
            return o.cmp_create(tkey, 0)
        record = TriggerKey.decode(held.value)
        if record.expired(now_ms, ttl_ms):
            return o.cmp_mod(tkey, held.mod_revision)
        if record.payload_digest != digest:
            raise AlreadyExists(
                f"idempotency_key {idempotency_key!r} triggered execution "
                f"{record.execution_id!r} with a different payload"
            )
        return Triggered(record.execution_id, None)

    async def _slot_taken(self, run_key: bytes, due_key: bytes) -> bool:
        return await self.kv.get(run_key) is not None or await self.kv.get(due_key) is not None


async def expire_trigger_keys(
    kv: KV, keys: Keys, now_ms: int, ttl_ms: int = TRIGGER_KEY_TTL_MS, *, page: int = EXPIRE_PAGE
) -> int:
    """Deletes the trigger keys older than ``ttl_ms``, ``page`` records a transaction (each
    compared on its mod revision: one a trigger just replaced stays); returns how many."""
    o = kv.ops
    start = keys.trigger_idem_prefix()
    end = prefix_end(start)
    deleted = 0
    while True:
        kvs, _, more = await kv.range(start, end, limit=page)
        old = [x for x in kvs if TriggerKey.decode(x.value).expired(now_ms, ttl_ms)]
        if old:
            resp = await kv.txn(
                [], [o.txn([o.cmp_mod(x.key, x.mod_revision)], [o.delete(x.key)]) for x in old]
            )
            deleted += sum(1 for n in range(len(old)) if resp.txn_succeeded(n))
        if not more or not kvs:
            return deleted
        start = kvs[-1].key + b"\0"
