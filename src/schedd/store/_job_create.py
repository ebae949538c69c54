"""Creating jobs: each job's first cursor, and the create transactions of a call.

A job is created by one nested transaction (create-if-absent on its key, its name and its
idempotency key); up to ``batch`` jobs share one outer transaction with the ``notify/{p}``
writes that hand the owners their first due entries. :class:`~schedd.store.JobStore` calls
:func:`create_jobs`; a create that fails is explained (:func:`_explain_create_failure`) from
what is stored, so an idempotent retry returns the job it created before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING

from schedd._errors import AlreadyExists, Conflict, JobNotFound, SchedError
from schedd.model import same_spec
from schedd.schedule import Schedule, jitter_offset_ms, parse_schedule
from schedd.store._deps import Graph, Link, check_parents, relink, resolve_parents
from schedd.store._names import check_unique_names, name_taken
from schedd.store._notify import notify_ops
from schedd.store._records import FIRE, DueEntry, JobState
from schedd.store.abc import Op
from schedd.v1 import job_pb2

if TYPE_CHECKING:
    from schedd.store._jobs import JobStore

#: Create transactions of one call in flight at once.
CREATE_TXNS_IN_FLIGHT = 4

#: Per job of a create call: (the job, whether this call created it) or why it was not.
Created = tuple[job_pb2.Job, bool] | SchedError


def first_state(job: job_pb2.Job, after_ms: int, schedule: Schedule | None = None) -> JobState:
    """The cursor of a job whose next fire is the first one strictly after ``after_ms``.

    ``schedule``: the job's schedule if the caller parsed it already (anchored at its
    ``created_ms``); parsed here otherwise.
    """
    if job.paused or job.after:  # a job with parents fires when they succeed, not by time
        return JobState()
    if schedule is None:
        schedule = parse_schedule(
            job.schedule.expr, job.schedule.timezone, anchor_ms=job.created_ms
        )
    nxt = schedule.next_fire(after_ms)
    if nxt is None:
        return JobState()
    return JobState(nxt + jitter_offset_ms(job.id, nxt, job.jitter_ms), nxt, 0)


def _needs_order(jobs: Sequence[job_pb2.Job]) -> bool:
    """Two jobs of the call share an id, a name or an idempotency key: the first must win."""
    keys = [(j.tenant, j.idempotency_key) for j in jobs if j.idempotency_key]
    names = {(j.tenant, j.name) for j in jobs}
    return (
        len(keys) != len(set(keys))
        or len({j.id for j in jobs}) != len(jobs)
        or len(names) != len(jobs)
    )


async def create_jobs(
    store: JobStore,
    jobs: Sequence[job_pb2.Job],
    now_ms: int,
    schedules: Sequence[Schedule | None] | None = None,
) -> list[Created]:
    """See :meth:`JobStore.create_jobs`."""
    parsed: Sequence[Schedule | None] = schedules or [None] * len(jobs)
    if any(j.after for j in jobs):
        return await _create_in_order(store, jobs, now_ms, parsed)
    batch = store.batch
    starts = range(0, len(jobs), batch)
    if len(starts) <= 1 or _needs_order(jobs):
        # One transaction at a time when two jobs of the call share an id or an
        # idempotency key: the first one's create must win, as the caller ordered them.
        out: list[Created] = []
        for i in starts:
            out += await _create_chunk(store, jobs[i : i + batch], parsed[i : i + batch], now_ms)
        return out
    # Several transactions in flight: etcd commits them in one raft round where it can.
    gate = asyncio.Semaphore(CREATE_TXNS_IN_FLIGHT)

    async def chunk(i: int) -> list[Created]:
        async with gate:
            return await _create_chunk(store, jobs[i : i + batch], parsed[i : i + batch], now_ms)

    # Every transaction ends before an error goes on (none is left running unobserved);
    # as one at a time, the ones that succeeded have created their jobs.
    parts = await asyncio.gather(*(chunk(i) for i in starts), return_exceptions=True)
    for part in parts:
        if isinstance(part, BaseException):
            raise part
    return [item for part in parts if not isinstance(part, BaseException) for item in part]


async def _create_in_order(
    store: JobStore,
    jobs: Sequence[job_pb2.Job],
    now_ms: int,
    parsed: Sequence[Schedule | None],
) -> list[Created]:
    """A call with jobs that have parents: the others first (a job may name a parent made
    earlier in the call), then each job with parents in a transaction of its own, which also
    rewrites its parents' specs (two in one transaction could write one parent twice)."""
    out: dict[int, Created] = {}
    plain = [n for n, j in enumerate(jobs) if not j.after]
    if plain:
        made = await create_jobs(
            store, [jobs[n] for n in plain], now_ms, [parsed[n] for n in plain]
        )
        out.update(zip(plain, made, strict=True))
    for n, job in enumerate(jobs):
        if job.after:
            out[n] = await _create_dependent(store, job, now_ms)
    return [out[n] for n in range(len(jobs))]


async def _create_dependent(store: JobStore, job: job_pb2.Job, now_ms: int) -> Created:
    """One job with parents: resolved, checked and linked (retried while a parent changes)."""
    for _ in range(5):
        graph = Graph(store.kv, store.keys)
        try:
            await resolve_parents(graph, job, store.names)
            await check_parents(graph, job)
            link = relink(store.kv, store.keys, graph, store.partitions, job.id, (), job.after)
        except SchedError as exc:
            return exc
        [made] = await _create_chunk(store, [job], [None], now_ms, link)
        if not isinstance(made, Conflict):
            return made
    return Conflict(f"job {job.id!r}: its parents kept changing; retry")


async def _create_chunk(
    store: JobStore,
    jobs: Sequence[job_pb2.Job],
    schedules: Sequence[Schedule | None],
    now_ms: int,
    link: Link | None = None,
) -> list[Created]:
    """``link``: for a single job with parents, what rewrites their specs."""
    k, o = store.keys, store.ops
    nested: list[Op] = []
    states: list[JobState] = []
    touched: dict[int, list[tuple[str, int, int]]] = {}
    clashes = check_unique_names(jobs)  # a name twice in one txn would be refused whole
    changed: dict[int, list[str]] = {}
    for n, (job, schedule) in enumerate(zip(jobs, schedules, strict=True)):
        if n in clashes:
            states.append(JobState())
            nested.append(o.txn([], [], []))
            continue
        job.partition = store.partition(job.id)
        state = first_state(job, now_ms - 1, schedule)
        states.append(state)
        cmps = [o.cmp_create(k.job_key(job.id), 0)]
        ops = [
            o.put(k.job_key(job.id), store.sealer.job_value(job)),
            o.put(k.state_key(job.id), state.encode()),
        ]
        name = k.name_key(job.tenant, job.name)
        cmps.append(o.cmp_create(name, 0))
        ops.append(o.put(name, job.id.encode()))
        if job.idempotency_key:
            idem = k.idem_key(job.tenant, job.idempotency_key)
            cmps.append(o.cmp_create(idem, 0))
            ops.append(o.put(idem, job.id.encode()))
        ops.append(o.put(k.tenant_job_key(job.tenant, job.id), b""))
        if state.due_ms:
            entry = DueEntry(job.partition, state.due_ms, job.id, FIRE, state.next_fire_ms)
            ops.append(o.put(k.due_key(job.partition, state.due_ms, job.id), entry.encode()))
            touched.setdefault(job.partition, []).append((job.id, state.due_ms, state.next_fire_ms))
        if link is not None:
            cmps += link[0]
            ops += link[1]
            changed = link[2]
        nested.append(o.txn(cmps, ops))
    resp = await store.kv.txn([], nested + notify_ops(o, k, changed, touched))
    rev = resp.revision
    out: list[Created] = []
    for n, job in enumerate(jobs):
        if n in clashes:
            out.append(await _explain_create_failure(store, job, clashes[n]))
        elif resp.txn_succeeded(n):
            job.version = rev
            job.next_fire_ms = states[n].next_fire_ms
            out.append((job, True))
        else:
            out.append(await _explain_create_failure(store, job))
    return out


async def _explain_create_failure(
    store: JobStore, job: job_pb2.Job, name_clash: SchedError | None = None
) -> Created:
    if job.idempotency_key:
        kv = await store.kv.get(store.keys.idem_key(job.tenant, job.idempotency_key))
        if kv is not None:
            try:
                existing = await store.get_job(kv.value.decode())
            except JobNotFound:
                return Conflict(f"idempotency key {job.idempotency_key!r} is being reused; retry")
            if same_spec(existing, job):
                return existing, False
            return AlreadyExists(
                f"idempotency key {job.idempotency_key!r} belongs to job {existing.id!r} "
                "with a different spec"
            )
    if await store.kv.get(store.keys.job_key(job.id)) is not None:
        return AlreadyExists(f"job {job.id!r} already exists")
    holder = await store.names.find(job.tenant, job.name)
    if holder is not None and holder != job.id:
        return name_taken(job.tenant, job.name, holder)
    return name_clash or Conflict(f"job {job.id!r}: created concurrently; retry")
