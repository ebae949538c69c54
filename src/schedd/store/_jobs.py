"""The client API's transactions: create, read, update, delete, trigger, backfill, redrive.

Any node serves these. Each change to a job that its partition owner must see also writes
``notify/{p}`` in the same transaction; owners watch ``notify/`` (one stream, events only for
API changes, never for their own claims) and re-read the named jobs.

:class:`JobStore` is the one face; the create path (:mod:`schedd.store._job_create`) and the
dead letters (:mod:`schedd.store._dead_letters`) live beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from schedd._errors import Conflict, JobNotFound, NotFound, SchedError
from schedd.model import new_execution, parse_execution_id
from schedd.schedule import Schedule
from schedd.store import _dead_letters, _job_create
from schedd.store._deps import Link, refuse_delete_with_children, relink_job
from schedd.store._job_create import first_state
from schedd.store._keys import Keys, partition_of
from schedd.store._names import JobNames
from schedd.store._notify import notify_ops
from schedd.store._records import (
    FIRE,
    DueEntry,
    JobState,
    StoredJob,
    decode_execution,
    encode_execution,
    new_run,
)
from schedd.store._sealing import Sealer
from schedd.store._triggers import TRIGGER_KEY_TTL_MS, Triggered, Triggers
from schedd.store._types import prefix_end
from schedd.store.abc import KV, Compare, Op
from schedd.v1 import execution_pb2, job_pb2

#: Pending executions due later than now + this are removed by update, pause and delete;
#: earlier ones may already be on a worker and are left to finish.
IN_FLIGHT_MARGIN_MS = 500

Mutation = Callable[[job_pb2.Job], job_pb2.Job]


class JobStore:
    """Jobs and executions as the client API sees them.

    Secret fields are sealed as they are written and opened as they are read, by ``sealer``
    (default: no keyring, plaintext). A read of a value that does not open raises
    :class:`~schedd._errors.Undecryptable`, except where only the record's metadata is needed
    (delete): the API never returns a sealed value.
    """

    def __init__(
        self,
        kv: KV,
        keys: Keys,
        partitions: int,
        *,
        batch: int = 128,
        sealer: Sealer | None = None,
    ) -> None:
        self.kv = kv
        self.ops = kv.ops
        self.keys = keys
        self.partitions = partitions
        self.batch = batch
        self.sealer = sealer or Sealer()
        self.names = JobNames(kv, keys)
        self._triggers = Triggers(kv, keys, self.partition, self.sealer)

    def partition(self, job_id: str) -> int:
        return partition_of(job_id, self.partitions)

    # -- create -------------------------------------------------------------------------------

    async def create_jobs(
        self,
        jobs: Sequence[job_pb2.Job],
        now_ms: int,
        schedules: Sequence[Schedule | None] | None = None,
    ) -> list[tuple[job_pb2.Job, bool] | SchedError]:
        """Creates validated jobs (ids assigned); per job (job, created) or the error.

        ``schedules``, when given, are the jobs' parsed schedules, in order (validation parsed
        them already: a create parses each schedule once).

        Idempotent: a job whose (tenant, idempotency key) exists returns the existing job with
        ``created=False`` when the spec is the same, and ALREADY_EXISTS when it differs.
        """
        return await _job_create.create_jobs(self, jobs, now_ms, schedules)

    async def name_runs(self, executions: Sequence[execution_pb2.Execution]) -> None:
        """Fills in each execution's ``job_name`` (one read of the jobs they belong to; a
        deleted job's stay empty). Names are never sealed."""
        ids = sorted({ex.job_id for ex in executions})
        if not ids:
            return
        kvs = await self.kv.get_many([self.keys.job_key(j) for j in ids])
        names = {
            j: job_pb2.Job.FromString(kv.value).name for j, kv in zip(ids, kvs, strict=True) if kv
        }
        for ex in executions:
            ex.job_name = names.get(ex.job_id, "")

    async def find_by_name(self, tenant: str, name: str) -> job_pb2.Job:
        """The job named ``name`` in ``tenant``.

        Raises:
            NotFound: no such job; FailedPrecondition: older jobs share the name.
        """
        job_id = await self.names.find(tenant, name)
        if job_id is None:
            raise NotFound(f"no job named {name!r} in tenant {tenant!r}")
        return await self.get_job(job_id)

    # -- read -----------------------------------------------------------------------------------

    async def read(self, job_id: str, *, opened: bool = True) -> StoredJob:
        """The job's spec and cursor; ``opened=False``: its secrets as stored (sealed)."""
        k, o = self.keys, self.ops
        resp = await self.kv.txn([], [o.get(k.job_key(job_id)), o.get(k.state_key(job_id))])
        read_job = self.sealer.read_job if opened else job_pb2.Job.FromString
        stored = StoredJob.from_kvs(resp.kvs(0), resp.kvs(1), read_job)
        if stored is None:
            raise JobNotFound(job_id)
        return stored

    def _present(self, stored: StoredJob) -> job_pb2.Job:
        job = stored.job
        job.version = stored.spec_revision
        job.next_fire_ms = stored.state.next_fire_ms
        job.last_fire_ms = stored.state.last_fire_ms
        job.partition = self.partition(job.id)
        return job

    async def get_job(self, job_id: str) -> job_pb2.Job:
        return self._present(await self.read(job_id))

    async def list_jobs(
        self, *, tenant: str = "", name_prefix: str = "", page_size: int = 100, page_token: str = ""
    ) -> tuple[list[job_pb2.Job], str]:
        """A page of jobs in id order; the token is the last id returned ("" at the end)."""
        start = self.keys.jobs_prefix() + page_token.encode() + (b"\x00" if page_token else b"")
        end = prefix_end(self.keys.jobs_prefix())
        found: list[job_pb2.Job] = []
        while len(found) < page_size:
            kvs, _, more = await self.kv.range(start, end, limit=max(page_size * 2, 100))
            for kv in kvs:
                job = job_pb2.Job.FromString(kv.value)
                job.version = kv.mod_revision
                if (not tenant or job.tenant == tenant) and job.name.startswith(name_prefix):
                    self.sealer.open_job(job)
                    found.append(job)
                    if len(found) == page_size:
                        more = more or kv is not kvs[-1]
                        break
            if not more or not kvs:
                break
            start = (
                self.keys.jobs_prefix() + found[-1].id.encode()
                if len(found) == page_size
                else kvs[-1].key
            ) + b"\x00"
        states = await self._states([j.id for j in found])
        for job in found:
            st = states.get(job.id, JobState())
            job.next_fire_ms, job.last_fire_ms = st.next_fire_ms, st.last_fire_ms
            job.partition = self.partition(job.id)
        token = found[-1].id if len(found) == page_size and more else ""
        return found, token

    async def _states(self, job_ids: Sequence[str]) -> dict[str, JobState]:
        keys = [self.keys.state_key(j) for j in job_ids]
        found = await self.kv.get_many(keys, per_txn=self.batch)
        return {j: JobState.decode(kv.value) for j, kv in zip(job_ids, found, strict=True) if kv}

    # -- change ---------------------------------------------------------------------------------

    async def _runs(self, job_id: str, *, opened: bool = True) -> list[execution_pb2.Execution]:
        start = self.keys.runs_job_prefix(self.partition(job_id), job_id)
        kvs, _ = await self.kv.range_all(start, prefix_end(start))
        read = self.sealer.read_execution if opened else decode_execution
        return [read(kv.value, kv.mod_revision) for kv in kvs]

    def _drop_future_runs(
        self, runs: Sequence[execution_pb2.Execution], now_ms: int, *, all_triggers: bool
    ) -> tuple[list[Compare], list[Op], list[bytes], set[str]]:
        """Compares and ops removing pre-claimed executions that cannot be on a worker yet.

        Returns:
            (compares, run deletes, due keys to delete, the ids of the executions removed).
            The due keys are left to the caller, who may be about to write one of them.
        """
        k, o = self.keys, self.ops
        cmps: list[Compare] = []
        ops: list[Op] = []
        due_keys: list[bytes] = []
        dropped: set[str] = set()
        for ex in runs:
            if ex.state not in (
                execution_pb2.EXECUTION_PENDING,
                execution_pb2.EXECUTION_RETRY_WAIT,
            ):
                continue
            if (
                ex.due_ms <= now_ms + IN_FLIGHT_MARGIN_MS
                and ex.state == execution_pb2.EXECUTION_PENDING
            ):
                continue
            if not all_triggers and ex.trigger != execution_pb2.TRIGGER_SCHEDULE:
                continue
            run_key = k.run_key(ex.partition, ex.job_id, ex.scheduled_ms)
            cmps.append(o.cmp_mod(run_key, ex.fencing_token))
            ops.append(o.delete(run_key))
            if ex.due_ms and (
                ex.state == execution_pb2.EXECUTION_RETRY_WAIT
                or ex.trigger != execution_pb2.TRIGGER_SCHEDULE
            ):
                due_keys.append(k.run_due_key(ex.partition, ex.due_ms, ex.job_id, ex.scheduled_ms))
            dropped.add(ex.id)
        return cmps, ops, due_keys, dropped

    async def update_job(
        self, job_id: str, mutate: Mutation, now_ms: int, *, expected_version: int = 0
    ) -> job_pb2.Job:
        """Applies ``mutate`` to the stored spec and re-plans the next fire, atomically.

        Pre-claimed scheduled executions not yet due are removed (they were claimed under the
        old spec); the next fire is recomputed from now. Retries on concurrent claims.

        Raises:
            JobNotFound, Conflict (expected_version differs), InvalidArgument from ``mutate``.
        """
        for _ in range(8):
            stored = await self.read(job_id)
            if expected_version and stored.spec_revision != expected_version:
                raise Conflict(
                    f"job {job_id!r} is at version {stored.spec_revision}, not {expected_version}"
                )
            new = mutate(job_pb2.Job.FromString(stored.job.SerializeToString()))
            link = await relink_job(self, stored.job, new)
            runs = await self._runs(job_id, opened=False)
            result = await self._replace(stored, new, runs, now_ms, link)
            if result is not None:
                return result
        raise Conflict(f"job {job_id!r} kept changing while being updated; retry")

    async def _replace(
        self,
        stored: StoredJob,
        new: job_pb2.Job,
        runs: Sequence[execution_pb2.Execution],
        now_ms: int,
        link: Link,
    ) -> job_pb2.Job | None:
        k, o, job_id = self.keys, self.ops, stored.job.id
        p = self.partition(job_id)
        cmps, ops, due_keys, _ = self._drop_future_runs(runs, now_ms, all_triggers=False)
        cmps += link[0]
        ops += link[1]
        name_cmps, name_ops = await self.names.move(
            job_id, stored.job.tenant, stored.job.name, new.name
        )
        cmps += name_cmps
        ops += name_ops
        state = first_state(new, now_ms)
        state.last_fire_ms = stored.state.last_fire_ms
        cmps += [
            o.cmp_mod(k.job_key(job_id), stored.spec_revision),
            o.cmp_mod(k.state_key(job_id), stored.state_revision),
        ]
        if stored.state.due_ms:
            due_keys.append(k.due_key(p, stored.state.due_ms, job_id))
        # The new due key is rewritten below: deleting it too would write it twice.
        new_due = k.due_key(p, state.due_ms, job_id) if state.due_ms else None
        ops += [o.delete(key) for key in due_keys if key != new_due]
        ops += [
            o.put(k.job_key(job_id), self.sealer.job_value(new)),
            o.put(k.state_key(job_id), state.encode()),
        ]
        if new_due is not None:
            entry = DueEntry(p, state.due_ms, job_id, FIRE, state.next_fire_ms)
            ops.append(o.put(new_due, entry.encode()))
        ops += notify_ops(o, k, {**link[2], p: [job_id, *link[2].get(p, [])]})
        resp = await self.kv.txn(cmps, ops)
        if not resp.succeeded:
            return None
        return self._present(StoredJob(new, resp.revision, state, resp.revision))

    async def set_paused(self, job_id: str, paused: bool, now_ms: int) -> job_pb2.Job:
        def mutate(job: job_pb2.Job) -> job_pb2.Job:
            job.paused = paused
            job.updated_ms = now_ms
            return job

        return await self.update_job(job_id, mutate, now_ms)

    async def delete_job(self, job_id: str, now_ms: int) -> int:
        """Deletes the job, removes its not-yet-due executions and cancels the others (those
        that may be out on a worker, or waiting for one): their owner, notified, stops them
        and ends them CANCELLED ("job deleted"). Returns how many were removed or cancelled.
        """
        k, o = self.keys, self.ops
        for _ in range(8):
            # Only revisions and keys are needed: a job whose secrets do not open here goes too.
            stored = await self.read(job_id, opened=False)
            refuse_delete_with_children(stored.job)
            gone = job_pb2.Job(id=job_id)
            link = await relink_job(self, stored.job, gone)
            runs = await self._runs(job_id, opened=False)
            p = self.partition(job_id)
            cmps, ops, due_keys, dropped = self._drop_future_runs(runs, now_ms, all_triggers=True)
            cmps += link[0]
            ops += link[1]
            ops += [o.delete(key) for key in due_keys]
            count = len(dropped)
            for ex in runs:
                if ex.id in dropped or ex.state == execution_pb2.EXECUTION_CANCELLED:
                    continue
                # Read unopened: its sealed fields go back as they are (only the state changes).
                ex.state = execution_pb2.EXECUTION_CANCELLED
                ex.reason = "job deleted"
                ex.finished_ms = now_ms
                run_key = k.run_key(p, ex.job_id, ex.scheduled_ms)
                cmps.append(o.cmp_mod(run_key, ex.fencing_token))
                ops.append(o.put(run_key, encode_execution(ex)))
                count += 1
            cmps.append(o.cmp_mod(k.job_key(job_id), stored.spec_revision))
            cmps.append(o.cmp_mod(k.state_key(job_id), stored.state_revision))
            ops += [o.delete(k.job_key(job_id)), o.delete(k.state_key(job_id))]
            if stored.state.due_ms:
                ops.append(o.delete(k.due_key(p, stored.state.due_ms, job_id)))
            if stored.job.idempotency_key:
                ops.append(o.delete(k.idem_key(stored.job.tenant, stored.job.idempotency_key)))
            ops.append(o.delete(k.tenant_job_key(stored.job.tenant, job_id)))
            tidem = k.trigger_idem_prefix(stored.job.tenant, job_id)
            ops.append(o.delete(tidem, prefix_end(tidem)))
            name_cmps, name_ops = await self.names.release(
                job_id, stored.job.tenant, stored.job.name
            )
            cmps += name_cmps
            ops += name_ops
            ckpts = k.ckpt_job_prefix(p, job_id)
            ops.append(o.delete(ckpts, prefix_end(ckpts)))
            ops += notify_ops(o, k, {**link[2], p: [job_id, *link[2].get(p, [])]})
            resp = await self.kv.txn(cmps, ops)
            if resp.succeeded:
                return count
        raise Conflict(f"job {job_id!r} kept changing while being deleted; retry")

    # -- runs on demand ---------------------------------------------------------------------------

    async def trigger(
        self,
        job: job_pb2.Job,
        now_ms: int,
        *,
        payload: bytes = b"",
        idempotency_key: str = "",
        key_ttl_ms: int = TRIGGER_KEY_TTL_MS,
    ) -> Triggered:
        """One manual execution of ``job``, due now; with ``idempotency_key``, the one that key
        made less than ``key_ttl_ms`` ago if any (see :mod:`schedd.store._triggers`)."""
        return await self._triggers.trigger(
            job, now_ms, payload=payload, idempotency_key=idempotency_key, ttl_ms=key_ttl_ms
        )

    async def add_runs(
        self,
        job: job_pb2.Job,
        scheduled: Sequence[int],
        trigger: int,
        now_ms: int,
        *,
        payload_override: bytes = b"",
    ) -> list[execution_pb2.Execution]:
        """Creates PENDING executions for these fire times, due now; existing ones are skipped
        (a time given twice makes one execution)."""
        k, o, p = self.keys, self.ops, self.partition(job.id)
        scheduled = list(dict.fromkeys(scheduled))
        created: list[execution_pb2.Execution] = []
        for i in range(0, len(scheduled), self.batch):
            nested: list[Op] = []
            chunk: list[execution_pb2.Execution] = []
            for n, sched in enumerate(scheduled[i : i + self.batch]):
                ex = new_execution(job, p, sched, now_ms + i + n, trigger)
                if payload_override:
                    ex.payload_override = payload_override
                    ex.has_payload_override = True
                run = new_run(o, k, ex, self.sealer.execution_value(ex))
                nested.append(o.txn(run.compares, run.ops))
                chunk.append(ex)
            guard = [o.cmp_mod(k.job_key(job.id), job.version)]
            resp = await self.kv.txn(guard, nested + notify_ops(o, k, {p: [job.id]}))
            if not resp.succeeded:
                raise Conflict(f"job {job.id!r} changed meanwhile; retry")
            for n, ex in enumerate(chunk):
                if resp.txn_succeeded(n):
                    ex.fencing_token = resp.revision
                    created.append(ex)
        return created

    async def cancel_run(
        self, execution_id: str, reason: str, now_ms: int
    ) -> execution_pb2.Execution | None:
        """Marks a live execution CANCELLED (its owner, notified, stops it and ends it).

        Returns the cancelled execution, None when no live execution has this id. One that is
        cancelled already is returned as it is.

        Raises:
            Conflict: it kept changing under the compare (several tries).
        """
        job_id, sched = parse_execution_id(execution_id)
        p = self.partition(job_id)
        run_key = self.keys.run_key(p, job_id, sched)
        o = self.ops
        for _ in range(5):
            kv = await self.kv.get(run_key)
            if kv is None:
                return None
            ex = self.sealer.read_execution(kv.value, kv.mod_revision)
            if ex.state == execution_pb2.EXECUTION_CANCELLED:
                return ex
            ex.state = execution_pb2.EXECUTION_CANCELLED
            ex.reason = reason
            ex.finished_ms = now_ms
            resp = await self.kv.txn(
                [o.cmp_mod(run_key, kv.mod_revision)],
                [
                    o.put(run_key, self.sealer.execution_value(ex)),
                    *notify_ops(o, self.keys, {p: [job_id]}),
                ],
            )
            if resp.succeeded:
                ex.fencing_token = resp.revision
                return ex
        raise Conflict(f"execution {execution_id!r} kept changing; retry")

    async def get_live_execution(self, execution_id: str) -> execution_pb2.Execution | None:
        job_id, sched = parse_execution_id(execution_id)
        kv = await self.kv.get(self.keys.run_key(self.partition(job_id), job_id, sched))
        return self.sealer.read_execution(kv.value, kv.mod_revision) if kv else None

    async def list_live(self, job_id: str = "") -> list[execution_pb2.Execution]:
        if job_id:
            return await self._runs(job_id)
        start = self.keys.runs_all_prefix()
        kvs, _ = await self.kv.range_all(start, prefix_end(start))
        return [self.sealer.read_execution(kv.value, kv.mod_revision) for kv in kvs]

    # -- tenants and dead letters ------------------------------------------------------------

    async def count_tenant_jobs(self, tenant: str) -> int:
        """How many jobs ``tenant`` has stored (its index ``tjobs/{tenant}/``: jobs created
        before the index existed are not counted)."""
        start = self.keys.tenant_jobs_prefix(tenant)
        return await self.kv.count(start, prefix_end(start))

    async def list_dead(self, tenant: str = "", job_id: str = "") -> list[execution_pb2.Execution]:
        """The dead executions of ``tenant`` (all tenants: ""), of one job if ``job_id``."""
        return await _dead_letters.list_dead(self, tenant, job_id)

    async def redrive(
        self, dead: Sequence[execution_pb2.Execution], now_ms: int
    ) -> list[execution_pb2.Execution]:
        """Moves dead executions back to live with a fresh budget of attempts, due now.

        Raises:
            FailedPrecondition: one is no longer dead, or is live again (those before it
                were redriven).
        """
        return await _dead_letters.redrive(self, dead, now_ms)

    async def get_dead(self, execution_id: str) -> execution_pb2.Execution:
        """The dead execution with this id.

        Raises:
            ExecutionNotFound: no dead execution has it.
        """
        return await _dead_letters.get_dead(self, execution_id)
