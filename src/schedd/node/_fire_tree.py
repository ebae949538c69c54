"""One root fire's executions (``ListExecutionsRequest.root``): the root's and those of every
job after it, transitively, for the same fire.

A child of a root fire at ``T`` runs as ``child@T`` (its execution id names its job and the
root's fire), so the executions of a fire are exactly ``{job}@{T}`` for the root and each of
its descendants: every node looks those ids up in its own history and memory, and the shared
part in the store, instead of scanning. The descendants are the ``children`` lists on the
specs as they are now (a child deleted since the fire is not listed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from schedd._errors import NotFound, SchedError
from schedd.auth import Caller
from schedd.history import Position, comes_after, list_order
from schedd.model import parse_execution_id, validate_execution_id
from schedd.node._views import matches
from schedd.store import Graph, JobStore
from schedd.v1 import execution_pb2, scheduler_pb2


async def check_root(jobs: JobStore, caller: Caller, root: str, tenant: str) -> None:
    """Refuses a ``root`` that is not an execution id (INVALID_ARGUMENT naming ``root``) or
    whose job does not exist, the caller may not see, or is not of ``tenant`` (the list's
    tenant filter, when set): NOT_FOUND naming ``root``."""
    job_id, _ = parse_execution_id(validate_execution_id("root", root))
    try:
        job = await jobs.get_job(job_id)
    except SchedError:
        job = None
    if job is None or not caller.sees(job.tenant) or (tenant and job.tenant != tenant):
        raise NotFound(f"root: no job {job_id!r}" + (f" in tenant {tenant!r}" if tenant else ""))


async def fire_execution_ids(jobs: JobStore, root: str) -> list[str]:
    """``{job}@{T}`` for the root (``root`` is ``JOB@T``, checked) and each of its
    descendants."""
    job_id, fire = parse_execution_id(root)
    below = await Graph(jobs.kv, jobs.keys).descendants(job_id)
    return [f"{j}@{fire}" for j in (job_id, *sorted(below))]


def fire_part(
    found: Iterable[execution_pb2.Execution | None],
    req: scheduler_pb2.ListExecutionsRequest,
    after: Position | None,
    limit: int,
) -> tuple[list[execution_pb2.Execution], bool]:
    """Of a fire's executions looked up, those passing ``req``'s other filters after
    ``after``, in list order: up to ``limit``, and whether there are more."""
    states = list(req.states)
    rows = [
        e
        for e in found
        if e is not None and matches(e, req.job_id, req.tenant, states) and comes_after(e, after)
    ]
    rows.sort(key=list_order)
    return rows[:limit], len(rows) > limit


async def shared_fire_part(
    jobs: JobStore,
    ids: list[str],
    req: scheduler_pb2.ListExecutionsRequest,
    after: Position | None,
    limit: int,
) -> tuple[list[execution_pb2.Execution], bool]:
    """The store's live copies of a fire's executions (see :func:`fire_part`)."""
    found = await asyncio.gather(*(jobs.get_live_execution(i) for i in ids))
    return fire_part(found, req, after, limit)


__all__ = ["check_root", "fire_execution_ids", "fire_part", "shared_fire_part"]
