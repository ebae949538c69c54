"""Bringing a store's records to the key format this code writes (``schedd store migrate``).

Format 2 scopes job ids by tenant (``model.scoped_job_id``): a job of tenant ``acme`` whose
client chose its id has the id ``acme:{id}``. A store of format 1 may hold jobs whose chosen
ids are not scoped; each is **renamed**: every record of the job moves to the keys of its
new id, in one transaction compared on every record it moves, and the job's executions
take the new id (``{new}@{scheduled_ms}``):

- ``jobs/``, ``state/`` and ``tjobs/`` (the spec's id and partition change);
- the job's entries of the due index, at the new id's partition, with the scheduled time in
  every RUN entry's key (an entry of key format 1 is written named);
- ``runs/`` and ``ckpt/``: only executions waiting on a RUN due entry (a retry's wait, a
  trigger, a backfill, a redrive not yet claimed), which no worker has;
- its name and idempotency keys (their value is the id); dead letters (``dlq/``).

A job with an execution that may be on a worker (claimed, dispatched, running) is **kept**
under its id: its worker reports a result under the old execution id, and a renamed
execution would run again under a new one. The summary names such jobs; run the command
again, with the nodes stopped, once they have finished. Generated ids (``j-`` and 20 random
characters) are unique in every tenant and are never renamed; a job whose tenant name has a
``":"`` cannot be scoped and is kept too.

Run with every node stopped (the caller checks ``nodes/``): a node would be claiming and
settling the records being moved. Node-local history keeps the old execution ids.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from schedd.model import (
    DEFAULT_TENANT,
    TENANT_SEP,
    execution_id,
    id_namespace,
    is_generated_id,
    scoped_job_id,
)
from schedd.store._keys import Keys, partition_of
from schedd.store._records import FIRE, DueEntry
from schedd.store._types import KeyValue, prefix_end
from schedd.store.abc import KV, Compare, KeyValueView, Op
from schedd.v1 import execution_pb2, job_pb2

#: Dead letters moved per transaction (three operations each).
DLQ_PAGE = 40


@dataclass
class MigrateSummary:
    """What a migration found and did.

    Attributes:
        jobs: jobs read.
        renamed: old id -> new id, for every job renamed (or to rename, in a dry run).
        kept: job id -> why it keeps its id for now.
        moved: records moved (every key of a renamed job, dead letters included).
        failed: job ids whose records changed while being moved (left as they were).
    """

    jobs: int = 0
    renamed: dict[str, str] = field(default_factory=dict)
    kept: dict[str, str] = field(default_factory=dict)
    moved: int = 0
    failed: list[str] = field(default_factory=list)

    def progress(self) -> str:
        return f"{self.jobs} jobs read, {len(self.renamed)} renamed, {len(self.kept)} kept"

    def line(self) -> str:
        text = (
            f"{self.jobs} jobs read: {len(self.renamed)} renamed ({self.moved} records moved),"
            f" {len(self.kept)} kept, {len(self.failed)} failed"
        )
        if self.kept:
            text += "; kept: " + "; ".join(f"{j} ({why})" for j, why in sorted(self.kept.items()))
        if self.failed:
            text += "; changed while moved: " + ", ".join(sorted(self.failed))
        return text


def needs_scoping(job_id: str, tenant: str) -> bool:
    """Whether a job's id breaks format 2's rule for its tenant (see ``scoped_job_id``)."""
    if is_generated_id(job_id):
        return False
    owner = id_namespace(job_id)
    if tenant == DEFAULT_TENANT:
        return owner is not None and owner != DEFAULT_TENANT  # default: is a migrated one
    return owner != tenant


def new_id_for(job_id: str, tenant: str) -> str:
    """The format 2 id of a job: its tenant's prefix; for the default tenant's id with a
    ``":"`` (format 1 allowed it), the default tenant's own prefix, ``default:``, which
    keeps it out of every other tenant's namespace."""
    if tenant == DEFAULT_TENANT:
        return f"{DEFAULT_TENANT}{TENANT_SEP}{job_id}"
    return scoped_job_id(tenant, job_id)


@dataclass
class _Job:
    """One job to rename, with what was read of it."""

    spec: KeyValue
    job: job_pb2.Job
    new_id: str
    due: list[tuple[KeyValue, DueEntry]] = field(default_factory=list)


class Migrator:
    """Renames the jobs of one cluster (one key prefix) whose ids format 2 scopes."""

    def __init__(
        self,
        kv: KV,
        keys: Keys,
        partitions: int,
        *,
        dry_run: bool = False,
        progress: Callable[[MigrateSummary], None] | None = None,
    ) -> None:
        self.kv = kv
        self.ops = kv.ops
        self.keys = keys
        self.partitions = partitions
        self.dry_run = dry_run
        self.summary = MigrateSummary()
        self._progress = progress

    async def run(self) -> MigrateSummary:
        """Finds the jobs to rename, then renames each in a transaction of its own."""
        todo = await self._find()
        await self._read_due(todo)
        for old in sorted(todo):
            await self._rename(old, todo[old])
            if self._progress is not None:
                self._progress(self.summary)
        return self.summary

    async def _find(self) -> dict[str, _Job]:
        k = self.keys
        kvs, _ = await self.kv.range_all(k.jobs_prefix(), prefix_end(k.jobs_prefix()))
        todo: dict[str, _Job] = {}
        taken = {k.parse_job_key(kv.key) for kv in kvs}
        for kv in kvs:
            self.summary.jobs += 1
            job = job_pb2.Job.FromString(kv.value)
            if not needs_scoping(job.id, job.tenant):
                continue
            if TENANT_SEP in job.tenant:
                self.summary.kept[job.id] = f"tenant {job.tenant!r} has a {TENANT_SEP!r}"
                continue
            new = new_id_for(job.id, job.tenant)
            if new in taken:
                self.summary.kept[job.id] = f"its new id {new!r} is taken"
                continue
            todo[job.id] = _Job(kv, job, new)
            self.summary.renamed[job.id] = new
        return todo

    async def _read_due(self, todo: dict[str, _Job]) -> None:
        """Reads the due index of every partition a job to rename is in (once each)."""
        k = self.keys
        for p in sorted({partition_of(old, self.partitions) for old in todo}):
            prefix = k.due_prefix(p)
            kvs, _ = await self.kv.range_all(prefix, prefix_end(prefix))
            for kv in kvs:
                part, due_ms, job_id, sched = k.parse_due_key(kv.key)
                if job_id in todo:
                    entry = DueEntry.decode(part, due_ms, job_id, kv.value, kv.mod_revision, sched)
                    todo[job_id].due.append((kv, entry))

    async def _rename(self, old: str, job: _Job) -> None:
        plan = await self._plan(old, job)
        if plan is None:
            del self.summary.renamed[old]
            return
        if self.dry_run:
            return
        compares, ops, dead, moves = plan
        resp = await self.kv.txn(compares, ops)
        if not resp.succeeded:
            del self.summary.renamed[old]
            self.summary.failed.append(old)
            return
        self.summary.moved += moves
        await self._move_dead(old, job, dead)

    async def _plan(
        self, old: str, job: _Job
    ) -> tuple[list[Compare], list[Op], list[KeyValueView], int] | None:
        """The transaction that moves the job (None: kept, the reason in the summary), and
        its dead letters, moved after it."""
        k, o = self.keys, self.ops
        p = partition_of(old, self.partitions)
        new, tenant = job.new_id, job.job.tenant
        reads = [
            o.get(k.state_key(old)),
            o.get(k.runs_job_prefix(p, old), prefix_end(k.runs_job_prefix(p, old))),
            o.get(k.ckpt_job_prefix(p, old), prefix_end(k.ckpt_job_prefix(p, old))),
            o.get(k.name_key(tenant, job.job.name)),
            o.get(k.dlq_prefix(tenant, old), prefix_end(k.dlq_prefix(tenant, old))),
            o.get(k.idem_prefix(tenant), prefix_end(k.idem_prefix(tenant))),
        ]
        resp = await self.kv.txn([], reads)
        state, runs, ckpts, name, dead, idem = (resp.kvs(n) for n in range(len(reads)))
        waiting = {e.scheduled_ms for _, e in job.due if e.kind != FIRE}
        for run in runs:
            ex = execution_pb2.Execution.FromString(run.value)
            if ex.scheduled_ms not in waiting:
                self.summary.kept[old] = f"execution {ex.id} may be on a worker; run it again"
                return None
        pn = partition_of(new, self.partitions)
        compares = [o.cmp_mod(job.spec.key, job.spec.mod_revision), o.cmp_create(k.job_key(new), 0)]
        ops: list[Op] = []

        def move(kv: KeyValueView, key: bytes, value: bytes) -> None:
            compares.append(o.cmp_mod(kv.key, kv.mod_revision))
            ops.extend([o.delete(kv.key), o.put(key, value)])

        spec = job_pb2.Job()
        spec.CopyFrom(job.job)
        spec.id, spec.partition = new, pn
        move(job.spec, k.job_key(new), spec.SerializeToString())
        for kv in state:
            move(kv, k.state_key(new), kv.value)
        for kv, entry in job.due:
            key = (
                k.due_key(pn, entry.due_ms, new)
                if entry.kind == FIRE
                else k.run_due_key(pn, entry.due_ms, new, entry.scheduled_ms)
            )
            move(kv, key, kv.value)
        for kv in runs:
            ex = _renamed(kv.value, new, pn)
            move(kv, k.run_key(pn, new, ex.scheduled_ms), ex.SerializeToString())
        for kv in ckpts:
            sched = int(kv.key.rsplit(b"/", 1)[1])
            move(kv, k.ckpt_key(pn, new, sched), kv.value)
        for kv in [*name, *idem]:
            if kv.value == old.encode():
                compares.append(o.cmp_mod(kv.key, kv.mod_revision))
                ops.append(o.put(kv.key, new.encode()))
        ops.extend(
            [o.delete(k.tenant_job_key(tenant, old)), o.put(k.tenant_job_key(tenant, new), b"")]
        )
        return compares, ops, list(dead), len(compares) - 1

    async def _move_dead(self, old: str, job: _Job, dead: list[KeyValueView]) -> None:
        k, o = self.keys, self.ops
        for start in range(0, len(dead), DLQ_PAGE):
            nested = []
            for kv in dead[start : start + DLQ_PAGE]:
                ex = _renamed(kv.value, job.new_id, partition_of(job.new_id, self.partitions))
                key = k.dlq_key(job.job.tenant, job.new_id, ex.scheduled_ms)
                nested.append(
                    o.txn(
                        [o.cmp_mod(kv.key, kv.mod_revision)],
                        [o.delete(kv.key), o.put(key, ex.SerializeToString())],
                    )
                )
            resp = await self.kv.txn([], nested)
            moved = sum(resp.txn_succeeded(n) for n in range(len(nested)))
            self.summary.moved += moved
            if moved < len(nested) and old not in self.summary.failed:
                self.summary.failed.append(old)


def _renamed(value: bytes, job_id: str, partition: int) -> execution_pb2.Execution:
    """An execution (as stored; sealed fields stay sealed) under its job's new id."""
    ex = execution_pb2.Execution.FromString(value)
    ex.job_id, ex.id, ex.partition = job_id, execution_id(job_id, ex.scheduled_ms), partition
    return ex


async def migrate_ids(
    kv: KV,
    keys: Keys,
    partitions: int,
    *,
    dry_run: bool = False,
    progress: Callable[[MigrateSummary], None] | None = None,
) -> MigrateSummary:
    """Renames every job whose id format 2 scopes (see the module's docstring)."""
    return await Migrator(kv, keys, partitions, dry_run=dry_run, progress=progress).run()
