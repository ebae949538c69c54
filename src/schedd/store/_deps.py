"""Jobs that run after other jobs (``Job.after``): the client API's side of the graph.

A job with parents (its ``after``: ids, or names in its tenant, resolved to ids here) has no
schedule of its own. Each parent's spec lists the jobs after it (``children``, output only,
rewritten with the child's create, update and delete in one transaction compared on every
spec it reads), so a parent's owner knows whom its results concern without another read.
Every parent of a job descends from one scheduled job, its **root**; parents with different
roots are refused, and so is a cycle (at update: a new parent that runs after the job
already), naming the jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from schedd._errors import Conflict, FailedPrecondition, InvalidArgument, NotFound
from schedd.store._keys import Keys, partition_of
from schedd.store._names import JobNames
from schedd.store.abc import KV, Compare, Op
from schedd.v1 import job_pb2

if TYPE_CHECKING:
    from schedd.store._jobs import JobStore

#: The longest chain of parents followed up to a root.
MAX_DEPTH = 64
#: What moves a job between parents: compares, ops, partition -> jobs to notify.
Link = tuple[list[Compare], list[Op], dict[int, list[str]]]


@dataclass
class Spec:
    """A job's spec as stored (sealed values stay sealed) and its revision."""

    job: job_pb2.Job
    revision: int


class Graph:
    """Reads of the job graph for one API call (each spec read once)."""

    def __init__(self, kv: KV, keys: Keys) -> None:
        self.kv = kv
        self.keys = keys
        self.specs: dict[str, Spec | None] = {}

    async def specs_of(self, ids: Iterable[str]) -> dict[str, Spec]:
        wanted = [i for i in dict.fromkeys(ids) if i not in self.specs]
        if wanted:
            kvs = await self.kv.get_many([self.keys.job_key(i) for i in wanted])
            for job_id, kv in zip(wanted, kvs, strict=True):
                self.specs[job_id] = (
                    None if kv is None else Spec(job_pb2.Job.FromString(kv.value), kv.mod_revision)
                )
        return {i: s for i in ids if (s := self.specs.get(i)) is not None}

    async def spec(self, job_id: str) -> Spec | None:
        return (await self.specs_of([job_id])).get(job_id)

    async def root_of(self, job_id: str) -> str:
        """The scheduled job ``job_id`` descends from (itself when it has no parents)."""
        current = job_id
        for _ in range(MAX_DEPTH):
            spec = await self.spec(current)
            if spec is None or not spec.job.after:
                return current
            current = spec.job.after[0]
        raise FailedPrecondition(f"job {job_id!r}: more than {MAX_DEPTH} parents deep")

    async def descendants(self, job_id: str) -> dict[str, str]:
        """Every job after ``job_id`` (transitively) -> the job it was reached from."""
        seen: dict[str, str] = {}
        todo = [job_id]
        while todo:
            current = todo.pop()
            spec = await self.spec(current)
            for child in spec.job.children if spec is not None else ():
                if child not in seen and child != job_id:
                    seen[child] = current
                    todo.append(child)
        return seen


async def resolve_parents(graph: Graph, job: job_pb2.Job, store_names: JobNames) -> None:
    """Replaces each of ``job.after`` given by name with the id of that job in the job's
    tenant.

    Raises:
        NotFound: naming ``job.after[n]``: no such job in the tenant (another tenant's job
            is not found either).
        InvalidArgument: the job names itself.
    """
    for n, ref in enumerate(list(job.after)):
        spec = await graph.spec(ref)
        if spec is None or spec.job.tenant != job.tenant:
            found = await store_names.find(job.tenant, ref)
            spec = await graph.spec(found) if found else None
        if spec is None or spec.job.tenant != job.tenant:
            raise NotFound(f"job.after[{n}]: no job {ref!r} in tenant {job.tenant!r}")
        if spec.job.id == job.id:
            raise InvalidArgument(f"job.after[{n}]", "a job cannot run after itself")
        job.after[n] = spec.job.id
    if len(set(job.after)) != len(job.after):
        raise InvalidArgument("job.after", "names one parent twice (by id and by name)")


async def check_parents(graph: Graph, job: job_pb2.Job) -> str:
    """The root of ``job``'s parents (ids); refuses parents with different roots and, for an
    existing job, a cycle and descendants left with parents of different roots.

    Raises:
        InvalidArgument: naming ``job.after`` and the jobs involved.
    """
    roots = {p: await graph.root_of(p) for p in job.after}
    if len(set(roots.values())) > 1:
        named = ", ".join(f"{p} (root {r})" for p, r in roots.items())
        raise InvalidArgument("job.after", f"parents descend from different roots: {named}")
    root = next(iter(roots.values()))
    below = await graph.descendants(job.id)
    for p in job.after:
        if p in below:
            raise InvalidArgument("job.after", f"cycle: {_path(below, job.id, p)} -> {job.id}")
    for d in below:  # each keeps one root: its parents outside this job's subtree must agree
        spec = await graph.spec(d)
        outside = [p for p in (spec.job.after if spec else ()) if p not in below and p != job.id]
        for p in outside:
            if (other := await graph.root_of(p)) != root:
                raise InvalidArgument(
                    "job.after",
                    f"job {d} (after {job.id}) also runs after {p}, whose root is {other},"
                    f" not {root}",
                )
    return root


def _path(parents: dict[str, str], top: str, bottom: str) -> str:
    chain = [bottom]
    while chain[-1] != top:
        chain.append(parents[chain[-1]])
    return " -> ".join(reversed(chain))


def relink(
    kv: KV,
    keys: Keys,
    graph: Graph,
    partitions: int,
    child: str,
    old: Sequence[str],
    new: Sequence[str],
) -> Link:
    """Compares and ops that move ``child`` from the ``children`` of ``old`` parents to those
    of ``new`` ones (specs read through ``graph``), and the partitions to notify (their
    owners re-read the parents). Raises Conflict when a parent is gone."""
    o = kv.ops
    cmps: list[Compare] = []
    ops: list[Op] = []
    notify: dict[int, list[str]] = {}
    for p in sorted(set(old) ^ set(new)):
        spec = graph.specs.get(p)
        if spec is None:
            if p in new:
                raise Conflict(f"job.after: job {p!r} was deleted meanwhile; retry")
            continue
        updated = job_pb2.Job()
        updated.CopyFrom(spec.job)
        kids = [c for c in updated.children if c != child]
        if p in new:
            kids.append(child)
        del updated.children[:]
        updated.children.extend(sorted(kids))
        cmps.append(o.cmp_mod(keys.job_key(p), spec.revision))
        ops.append(o.put(keys.job_key(p), updated.SerializeToString()))
        notify.setdefault(partition_of(p, partitions), []).append(p)
    return cmps, ops, notify


def refuse_delete_with_children(job: job_pb2.Job) -> None:
    """A job that others run after is not deleted (they would wait forever).

    Raises:
        FailedPrecondition: naming them.
    """
    if job.children:
        raise FailedPrecondition(
            f"job {job.id!r} has jobs that run after it ({', '.join(job.children)}):"
            " delete them, or change their after, first"
        )


async def relink_job(store: JobStore, old: job_pb2.Job, new: job_pb2.Job) -> Link:
    """What moves ``new`` (an update of ``old``; an empty job for a delete) between its old
    and new parents' ``children``: names in its ``after`` resolved; cycles and mixed roots
    refused."""
    if not old.after and not new.after:
        return [], [], {}
    graph = Graph(store.kv, store.keys)
    await graph.specs_of(old.after)
    await resolve_parents(graph, new, store.names)
    if new.after:
        await check_parents(graph, new)
    return relink(store.kv, store.keys, graph, store.partitions, new.id, old.after, new.after)
