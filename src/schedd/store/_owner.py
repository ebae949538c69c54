"""The partition owner's transactions: every one fenced by the owner key's create revision.

The owner batches: a claim, a result, a redelivery are each an :class:`Item` (compares plus
ops for one job), and :meth:`PartitionStore.apply` sends many items as nested transactions of
one outer transaction whose only compare is the fence. A zombie owner (its lease expired, a
newer owner holds the key) fails the outer compare and writes nothing; a concurrent API change
to one job fails only that job's nested compare.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NewType

from schedd._errors import FencedOut
from schedd.store._group import Committed, GroupCommit, commit_alone
from schedd.store._keys import Keys
from schedd.store._records import (
    FIRE,
    RUN,
    DueEntry,
    JobState,
    StoredJob,
)
from schedd.store._sealing import Sealer
from schedd.store._types import Fence, KeyValue, prefix_end
from schedd.store.abc import KV, KeyValueView, Op, TxnRejected, TxnResult
from schedd.v1 import execution_pb2

#: Compares and ops that must apply together for one job: a nested transaction made by the
#: backend's op builder (for etcd, the wire bytes of one ``success`` entry of the outer txn).
#: The owner builds thousands a second; bytes cost a fraction of protobuf messages.
Item = NewType("Item", object)


@dataclass(slots=True)
class Applied:
    """What :meth:`PartitionStore.apply` did with a batch of items, by item index.

    Attributes:
        ok: whether the item's compares held and it was written.
        revisions: the revision it was written at (0 when it was not): the fencing token of
            every execution it wrote.
        rejected: items the store refused on their own as malformed, with the store's
            reason; never written, and refused again if sent again as they are.
    """

    ok: list[bool]
    revisions: list[int]
    rejected: dict[int, str]

    @property
    def revision(self) -> int:
        """The last revision written (0: nothing was)."""
        return max(self.revisions, default=0)


@dataclass
class JobView:
    """One job as its owner reconciles it: spec and cursor, live executions, due entries."""

    cached: StoredJob | None
    runs: list[execution_pb2.Execution]
    due: list[DueEntry] = field(default_factory=list)


class PartitionStore:
    """Reads and fenced writes of one owned partition.

    Secret fields are sealed as they are written and opened as they are read, by ``sealer``
    (default: no keyring, plaintext). Reads are lenient: a value that does not open stays
    sealed (counted by the sealer), so one bad record does not stop the partition; the firer
    refuses to dispatch it (see :meth:`Sealer.reopen`).
    """

    def __init__(
        self,
        kv: KV,
        keys: Keys,
        fence: Fence,
        *,
        max_items: int = 128,
        write_gate: asyncio.Semaphore | None = None,
        sealer: Sealer | None = None,
        committer: GroupCommit | None = None,
    ) -> None:
        self.kv = kv
        # Shared by a node's partitions: joins their batches in one transaction (None: each
        # batch is a transaction of its own).
        self._committer = committer
        self.sealer = sealer = sealer or Sealer()
        self._encode_execution = sealer.execution_value
        self._read_execution = sealer.read_execution_lenient
        self._read_job = sealer.read_job_lenient
        # Shared by a node's partitions: the fenced write transactions it has in flight at
        # once (None: no bound). See NodeConfig.max_write_txns.
        self._write_gate: contextlib.AbstractAsyncContextManager[object] = (
            write_gate if write_gate is not None else contextlib.nullcontext()
        )
        self.keys = keys
        self.fence = fence
        self.partition = fence.partition
        self.max_items = max_items
        # Built once, bound once: every item needs several keys and ops.
        pk = keys.partition_keys(self.partition)
        self._job_key, self._state_key = pk.job_key, pk.state_key
        self._due_key, self._run_key = pk.due_key, pk.run_key
        self._run_due_key = pk.run_due_key
        # The claim path concatenates these itself (a call per key costs more than the key).
        self._job_pfx, self._state_pfx = pk.jobs, pk.states
        ops = kv.ops
        self._cmp_create, self._cmp_mod = ops.cmp_create, ops.cmp_mod
        self._put, self._delete, self._get, self._txn = ops.put, ops.delete, ops.get, ops.txn

    # -- reads ------------------------------------------------------------------------------

    async def load_due(self, until_ms: int, *, after_ms: int = -1) -> tuple[list[DueEntry], int]:
        """Due entries with ``after_ms < due_ms <= until_ms``, and the revision of the read."""
        start = self.keys.due_prefix(self.partition)
        if after_ms >= 0:
            start = self.keys.due_until(self.partition, after_ms)
        kvs, rev = await self.kv.range_all(start, self.keys.due_until(self.partition, until_ms))
        return [self.due_entry(kv) for kv in kvs], rev

    def due_entry(self, kv: KeyValue) -> DueEntry:
        p, due_ms, job_id, key_sched = self.keys.parse_due_key(kv.key)
        return DueEntry.decode(p, due_ms, job_id, kv.value, kv.mod_revision, key_sched)

    def entry_key(self, entry: DueEntry) -> bytes:
        """The key a due entry is stored at."""
        jid = entry.job_id.encode()
        if entry.names_execution:
            return self._run_due_key(entry.due_ms, jid, entry.scheduled_ms)
        return self._due_key(entry.due_ms, jid)

    async def load_runs(self) -> list[execution_pb2.Execution]:
        """Live executions of the partition, tokens filled from mod revisions, each with its
        latest checkpoint (the run key's, or the newer one of its ``ckpt/`` key)."""
        start = self.keys.runs_prefix(self.partition)
        kvs, _ = await self.kv.range_all(start, prefix_end(start))
        cstart = self.keys.ckpt_prefix(self.partition)
        ckpts, _ = await self.kv.range_all(cstart, prefix_end(cstart))
        return self._with_checkpoints(kvs, ckpts, len(start), len(cstart))

    def _with_checkpoints(
        self,
        runs: Sequence[KeyValueView],
        ckpts: Sequence[KeyValueView],
        run_pfx: int,
        ckpt_pfx: int,
    ) -> list[execution_pb2.Execution]:
        """Decoded runs; a ``ckpt/`` key written after its run key replaces its checkpoint."""
        saved = {kv.key[ckpt_pfx:]: kv for kv in ckpts}
        out = []
        read, read_checkpoint = self._read_execution, self.sealer.read_checkpoint_lenient
        for kv in runs:
            ex = read(kv.value, kv.mod_revision)
            ck = saved.get(kv.key[run_pfx:])
            if ck is not None and ck.mod_revision > kv.mod_revision:
                ex.checkpoint = read_checkpoint(ck.value, ex.job_id, ex.scheduled_ms)
            out.append(ex)
        return out

    async def fetch_jobs(self, job_ids: Iterable[str]) -> dict[str, StoredJob]:
        """Specs and states of these jobs, batched into few round trips; missing jobs absent."""
        ids = list(dict.fromkeys(job_ids))
        out: dict[str, StoredJob] = {}
        per_txn = max(1, self.max_items // 2)
        for i in range(0, len(ids), per_txn):
            chunk = ids[i : i + per_txn]
            ops = []
            for job_id in chunk:
                jid = job_id.encode()
                ops += [self._get(self._job_key(jid)), self._get(self._state_key(jid))]
            resp = await self.kv.txn((), ops)
            for n, job_id in enumerate(chunk):
                stored = StoredJob.from_kvs(resp.kvs(2 * n), resp.kvs(2 * n + 1), self._read_job)
                if stored is not None:
                    out[job_id] = stored
        return out

    async def fetch_views(self, job_ids: Iterable[str]) -> dict[str, JobView]:
        """Everything the owner keeps about these jobs, in a few batched round trips.

        Per job: spec and cursor (None when deleted), its live executions, and the due entries
        that exist for it (the schedule's next fire and any RUN entries of its executions).
        """
        ids = list(dict.fromkeys(job_ids))
        views: dict[str, JobView] = {}
        per_txn = max(1, self.max_items // 4)
        for i in range(0, len(ids), per_txn):
            chunk = ids[i : i + per_txn]
            ops = []
            for job_id in chunk:
                jid = job_id.encode()
                runs = self.keys.runs_job_prefix(self.partition, job_id)
                ckpts = self.keys.ckpt_job_prefix(self.partition, job_id)
                ops += [
                    self._get(self._job_key(jid)),
                    self._get(self._state_key(jid)),
                    self._get(runs, prefix_end(runs)),
                    self._get(ckpts, prefix_end(ckpts)),
                ]
            resp = await self.kv.txn((), ops)
            for n, job_id in enumerate(chunk):
                views[job_id] = self._view(job_id, resp, 4 * n)
        await self._fill_due(views)
        return views

    def _view(self, job_id: str, resp: TxnResult, at: int) -> JobView:
        cached = StoredJob.from_kvs(resp.kvs(at), resp.kvs(at + 1), self._read_job)
        runs_pfx = len(self.keys.runs_prefix(self.partition))
        ckpt_pfx = len(self.keys.ckpt_prefix(self.partition))
        runs = self._with_checkpoints(resp.kvs(at + 2), resp.kvs(at + 3), runs_pfx, ckpt_pfx)
        return JobView(cached, runs)

    async def _fill_due(self, views: dict[str, JobView]) -> None:
        keys: list[bytes] = []
        for job_id, view in views.items():
            jid = job_id.encode()
            if view.cached is not None and view.cached.state.due_ms:
                keys.append(self._due_key(view.cached.state.due_ms, jid))
            for ex in view.runs:
                if ex.due_ms:
                    keys.append(self._run_due_key(ex.due_ms, jid, ex.scheduled_ms))
                    # Written by a node of key format 1 (its RUN keys did not name the run).
                    keys.append(self._due_key(ex.due_ms, jid))
        found = await self.kv.get_many(list(dict.fromkeys(keys)), per_txn=self.max_items)
        seen: set[tuple[str, int, str, int]] = set()
        for kv in found:
            if kv is not None:
                entry = self.due_entry(kv)
                # A FIRE key and a legacy RUN key are one key: listed once.
                ident = (entry.job_id, entry.due_ms, entry.kind, entry.scheduled_ms)
                if ident not in seen:
                    seen.add(ident)
                    views[entry.job_id].due.append(entry)

    async def get_runs(
        self, wanted: Iterable[tuple[str, int]]
    ) -> dict[tuple[str, int], execution_pb2.Execution]:
        """The live executions at these (job, scheduled) run keys, batched."""
        keys = [self.keys.run_key(self.partition, job, sched) for job, sched in wanted]
        out: dict[tuple[str, int], execution_pb2.Execution] = {}
        for kv in await self.kv.get_many(keys, per_txn=self.max_items):
            if kv is not None:
                ex = self._read_execution(kv.value, kv.mod_revision)
                out[(ex.job_id, ex.scheduled_ms)] = ex
        return out

    # -- the fenced batch -------------------------------------------------------------------

    async def apply(self, items: Sequence[Item]) -> Applied:
        """Applies items as nested txns under the fence: per item, whether it was written.

        Items go ``max_items`` to a transaction. A transaction the store refuses as
        malformed (:class:`TxnRejected`: one key written twice) is split in halves and each
        half applied on its own, down to the single item that cannot be written: it alone is
        left out (``Applied.rejected``) and every other item is written as if it had never
        shared a batch with it.

        Returns:
            Per item: whether its compares held and it was written, the revision it was
            written at (the fencing token of every execution it wrote), and the items the
            store refused on their own with its reason.

        Raises:
            FencedOut: the fence no longer holds; the transaction that found it wrote nothing
                (earlier chunks, or earlier halves of a split one, were written under the
                fence while it held).
        """
        applied = Applied([], [], {})
        for i in range(0, len(items), self.max_items):
            await self._apply_chunk(items, i, min(len(items), i + self.max_items), applied)
        return applied

    async def _apply_chunk(self, items: Sequence[Item], start: int, end: int, out: Applied) -> None:
        """Applies ``items[start:end]`` in one transaction, or split if the store refuses it."""
        try:
            resp = await self._commit(items[start:end])
        except TxnRejected as exc:
            if end - start == 1:
                out.ok.append(False)
                out.revisions.append(0)
                out.rejected[start] = str(exc)
                return
            middle = (start + end) // 2
            await self._apply_chunk(items, start, middle, out)
            await self._apply_chunk(items, middle, end, out)
            return
        if not resp.succeeded:
            raise FencedOut(self.partition, self.fence.epoch)
        out.ok += resp.outcomes
        out.revisions += [resp.revision] * (end - start)

    async def _commit(self, items: Sequence[Item]) -> Committed:
        """One fenced transaction of ``items`` (joined with other partitions' by the node's
        group commit, when there is one)."""
        if self._committer is not None:
            return await self._committer.commit(self.fence, items)
        return await commit_alone(self.kv, self.fence, items, self._write_gate)

    # -- item builders ------------------------------------------------------------------------

    def claim_fire(
        self,
        cached: StoredJob,
        entry: DueEntry,
        executions: Sequence[execution_pb2.Execution],
        next_state: JobState,
        then: Sequence[Op] = (),
    ) -> Item:
        """Moves a FIRE due key to the job's next fire and creates the executions it yields
        (``then``: more ops of the same write, e.g. the arrivals of missed fires).

        Exactly one execution per (job, scheduled time): each run key must not exist yet.
        Executions may be empty (every fire was missed or skipped): the key still moves.
        """
        jid = entry.job_id.encode()
        due_key = self._due_key(entry.due_ms, jid)
        state_key = self._state_pfx + jid
        cmp_mod, put, encode = self._cmp_mod, self._put, self._encode_execution
        compares = [
            cmp_mod(self._job_pfx + jid, cached.spec_revision),
            cmp_mod(state_key, cached.state_revision),
            cmp_mod(due_key, entry.mod_revision),
        ]
        ops = [self._delete(due_key), put(state_key, next_state.encode())]
        for ex in executions:
            run_key = self._run_key(jid, ex.scheduled_ms)
            compares.append(self._cmp_create(run_key, 0))
            ops.append(put(run_key, encode(ex)))
        if next_state.due_ms:
            value = DueEntry.encode_value(FIRE, next_state.next_fire_ms)
            ops.append(put(self._due_key(next_state.due_ms, jid), value))
        ops.extend(then)
        return Item(self._txn(compares, ops))

    def unclaim(self, cached: StoredJob, executions: Sequence[execution_pb2.Execution]) -> Item:
        """Undoes claims of schedule fires: deletes their runs, moves the due key back."""
        job_id = cached.job.id
        jid = job_id.encode()
        first = min(executions, key=lambda e: e.scheduled_ms)
        compares = [self._cmp_mod(self._state_key(jid), cached.state_revision)]
        ops = []
        for ex in executions:
            run_key = self._run_key(jid, ex.scheduled_ms)
            compares.append(self._cmp_mod(run_key, ex.fencing_token))
            ops.append(self._delete(run_key))
        if cached.state.due_ms and cached.state.due_ms != first.due_ms:
            ops.append(self._delete(self._due_key(cached.state.due_ms, jid)))
        back = JobState(first.due_ms, first.scheduled_ms, cached.state.last_fire_ms)
        entry = DueEntry(self.partition, first.due_ms, job_id, FIRE, first.scheduled_ms)
        ops += [
            self._put(self._due_key(first.due_ms, jid), entry.encode()),
            self._put(self._state_key(jid), back.encode()),
        ]
        return Item(self._txn(compares, ops))

    def drop_due(self, entry: DueEntry) -> Item:
        """Removes a due entry that points at nothing (its job or execution is gone)."""
        due_key = self.entry_key(entry)
        return Item(
            self._txn([self._cmp_mod(due_key, entry.mod_revision)], [self._delete(due_key)])
        )

    def rewrite_run(
        self,
        execution: execution_pb2.Execution,
        *,
        consume: DueEntry | None = None,
        add_due_ms: int = 0,
    ) -> Item:
        """Rewrites a live execution (new attempt, redelivery, re-token), compared on its token.

        The write's revision becomes the execution's new fencing token. ``consume`` deletes the
        RUN due entry that led here; ``add_due_ms`` adds one (a retry's durable timer), at a
        key that names this execution: two executions told to retry at the same instant
        (a breaker's cool-down, a ``Retry-After`` date) never write one key.
        """
        jid = execution.job_id.encode()
        run_key = self._run_key(jid, execution.scheduled_ms)
        compares = [self._cmp_mod(run_key, execution.fencing_token)]
        ops = [self._put(run_key, self._encode_execution(execution))]
        if consume is not None:
            due_key = self.entry_key(consume)
            compares.append(self._cmp_mod(due_key, consume.mod_revision))
            ops.append(self._delete(due_key))
        if add_due_ms:
            value = DueEntry.encode_value(RUN, execution.scheduled_ms)
            ops.append(self._put(self._run_due_key(add_due_ms, jid, execution.scheduled_ms), value))
        return Item(self._txn(compares, ops))

    def save_checkpoint(self, execution: execution_pb2.Execution) -> Item:
        """Writes a live execution's latest checkpoint (``execution.checkpoint``) to its
        ``ckpt/`` key, if the execution still holds its token (the run key is not touched:
        the token stays)."""
        run_key = self._run_key(execution.job_id.encode(), execution.scheduled_ms)
        return Item(
            self._txn(
                [self._cmp_mod(run_key, execution.fencing_token)],
                [self._put(self._ckpt_key(execution), self.sealer.checkpoint_value(execution))],
            )
        )

    def _ckpt_key(self, execution: execution_pb2.Execution) -> bytes:
        return self.keys.ckpt_key(self.partition, execution.job_id, execution.scheduled_ms)

    def finish_run(
        self,
        execution: execution_pb2.Execution,
        *,
        dead_record: execution_pb2.Execution | None = None,
        then: Sequence[Op] = (),
    ) -> Item:
        """Ends a live execution (compared on its token): its run key leaves etcd.

        ``dead_record`` (state DEAD) is written to the dead-letter queue in the same txn, and
        so are ``then`` (the arrivals at the job's children).
        """
        run_key = self._run_key(execution.job_id.encode(), execution.scheduled_ms)
        ops = [self._delete(run_key)]
        if execution.checkpoint:  # it may have a ckpt/ key
            ops.append(self._delete(self._ckpt_key(execution)))
        if dead_record is not None:
            dlq = self.keys.dlq_key(execution.tenant, execution.job_id, execution.scheduled_ms)
            ops.append(self._put(dlq, self._encode_execution(dead_record)))
        ops.extend(then)
        return Item(self._txn([self._cmp_mod(run_key, execution.fencing_token)], ops))
