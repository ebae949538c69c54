"""Dead letters as the client API sees them: list, read and redrive ``dlq/{tenant}/...``.

A dead execution is keyed by its job's tenant, so finding one by id needs the job's tenant
first; for a job deleted since, every tenant's dead letters are scanned. A redrive moves the
execution back to ``runs/`` in one fenced transaction (compare on the dead letter's revision),
due now, with a fresh budget of attempts. :class:`~schedd.store.JobStore` delegates here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from schedd._errors import ExecutionNotFound, FailedPrecondition, JobNotFound
from schedd.model import parse_execution_id
from schedd.store._notify import notify_ops
from schedd.store._records import RUN, DueEntry
from schedd.store._types import KeyValue, prefix_end
from schedd.v1 import execution_pb2

if TYPE_CHECKING:
    from schedd.store._jobs import JobStore


async def list_dead(
    store: JobStore, tenant: str = "", job_id: str = ""
) -> list[execution_pb2.Execution]:
    """See :meth:`JobStore.list_dead`."""
    if job_id and not tenant:
        tenant = await _tenant_of(store, job_id)
    start = store.keys.dlq_prefix(tenant or None, job_id or None)
    kvs, _ = await store.kv.range_all(start, prefix_end(start))
    return [store.sealer.read_execution(kv.value, kv.mod_revision) for kv in kvs]


def _revived(ex: execution_pb2.Execution, due_ms: int) -> execution_pb2.Execution:
    """The live execution a redrive makes of the dead ``ex``, due at ``due_ms``."""
    live = execution_pb2.Execution()
    live.CopyFrom(ex)
    live.state = execution_pb2.EXECUTION_PENDING
    # A fresh budget of attempts, numbered on from the dead ones: worker ledgers key
    # finished attempts by number, and must not answer a redrive from the ledger.
    live.attempt = ex.attempt + 1
    live.max_attempts = ex.attempt + (ex.max_attempts or 3)
    live.error = ""
    live.worker_id = ""
    live.finished_ms = live.started_ms = live.dispatched_ms = 0
    live.trigger = execution_pb2.TRIGGER_REDRIVE
    live.due_ms = due_ms
    return live


async def redrive(
    store: JobStore, dead: Sequence[execution_pb2.Execution], now_ms: int
) -> list[execution_pb2.Execution]:
    """See :meth:`JobStore.redrive`."""
    k, o = store.keys, store.ops
    out: list[execution_pb2.Execution] = []
    for n, ex in enumerate(dead):
        p = store.partition(ex.job_id)
        live = _revived(ex, now_ms + n)
        run_key = k.run_key(p, ex.job_id, ex.scheduled_ms)
        dlq_key = k.dlq_key(ex.tenant, ex.job_id, ex.scheduled_ms)
        entry = DueEntry(p, live.due_ms, ex.job_id, RUN, ex.scheduled_ms)
        resp = await store.kv.txn(
            [o.cmp_mod(dlq_key, ex.fencing_token), o.cmp_create(run_key, 0)],
            [
                o.delete(dlq_key),
                o.put(run_key, store.sealer.execution_value(live)),
                o.put(k.run_due_key(p, live.due_ms, ex.job_id, ex.scheduled_ms), entry.encode()),
                *notify_ops(o, k, {p: [ex.job_id]}),
            ],
        )
        if not resp.succeeded:
            raise FailedPrecondition(f"execution {ex.id!r} is no longer dead or is live again")
        live.fencing_token = resp.revision
        out.append(live)
    return out


async def get_dead(store: JobStore, execution_id: str) -> execution_pb2.Execution:
    """See :meth:`JobStore.get_dead`."""
    job_id, sched = parse_execution_id(execution_id)
    for kv in await _dlq_candidates(store, job_id, sched):
        return store.sealer.read_execution(kv.value, kv.mod_revision)
    raise ExecutionNotFound(execution_id)


async def _tenant_of(store: JobStore, job_id: str) -> str:
    # Only the tenant: a job whose secrets do not open here still lists its dead letters.
    return (await store.read(job_id, opened=False)).job.tenant


async def _dlq_candidates(store: JobStore, job_id: str, sched: int) -> list[KeyValue]:
    try:
        tenant = await _tenant_of(store, job_id)
    except JobNotFound:
        start = store.keys.dlq_prefix()
        kvs, _ = await store.kv.range_all(start, prefix_end(start))
        suffix = f"/{job_id}/".encode() + b"%013d" % sched
        return [kv for kv in kvs if kv.key.endswith(suffix)]
    kv = await store.kv.get(store.keys.dlq_key(tenant, job_id, sched))
    return [kv] if kv else []
