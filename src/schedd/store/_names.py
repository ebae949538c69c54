"""Job names, unique within a tenant: the ``names/`` index (value: the job id).

A create puts its job's name key under a ``create_revision == 0`` compare, in the create's
transaction, so two jobs can never take one name; a rename moves the key in the update's
transaction and a delete removes it, each only when the key names that job. Jobs stored
before names were unique get their keys once (:meth:`JobNames.index_existing`, at node
start); a name two of them share stays out of the index and is reported, with how to rename.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from schedd._errors import AlreadyExists, FailedPrecondition
from schedd.store._keys import Keys
from schedd.store._types import KeyValue, prefix_end
from schedd.store.abc import KV, Compare, Op
from schedd.v1 import job_pb2

log = logging.getLogger(__name__)


def name_taken(tenant: str, name: str, holder: str) -> AlreadyExists:
    return AlreadyExists(
        f"job.name: {name!r} is taken in tenant {tenant!r} by job {holder!r}; choose another "
        "name, or change that job (schedctl job update / apply)"
    )


@dataclass
class Shared:
    """One name that jobs stored before names were unique share."""

    tenant: str
    name: str
    job_ids: list[str]

    def advice(self) -> str:
        rest = self.job_ids[1:]
        renames = "; ".join(
            f"schedctl job update {j} --name {self.name}-{n}" for n, j in enumerate(rest, 2)
        )
        return (
            f"jobs {', '.join(self.job_ids)} of tenant {self.tenant!r} share the name "
            f"{self.name!r} (created before names were unique); rename all but one, e.g. "
            f"{renames}"
        )


class JobNames:
    """Reads and guards the name index (see the module docstring)."""

    def __init__(self, kv: KV, keys: Keys) -> None:
        self.kv = kv
        self.keys = keys

    async def find(self, tenant: str, name: str) -> str | None:
        """The id of the job named ``name`` in ``tenant``, or None.

        Raises:
            FailedPrecondition: jobs from before names were unique share the name.
        """
        key = self.keys.name_key(tenant, name)
        kv = await self.kv.get(key)
        if kv is not None:
            return kv.value.decode()
        if await self.kv.get(self.keys.names_indexed_key()) is not None:
            return None
        missing, shared = await self._scan()  # not all indexed yet: look at the jobs
        for s in shared:
            if s.tenant == tenant and s.name == name:
                raise FailedPrecondition(s.advice())
        return next((jid for k, jid in missing if k == key), None)

    async def move(
        self, job_id: str, tenant: str, old: str, new: str
    ) -> tuple[list[Compare], list[Op]]:
        """The compares and ops that move the job's name from ``old`` to ``new`` (none when
        they are equal).

        Raises:
            AlreadyExists: ``new`` is another job's name.
        """
        o, k = self.kv.ops, self.keys
        if old == new:
            return [], []
        cmps, ops = await self.release(job_id, tenant, old)
        taken = await self.kv.get(k.name_key(tenant, new))
        if taken is not None and taken.value.decode() != job_id:
            raise name_taken(tenant, new, taken.value.decode())
        cmps.append(o.cmp_create(k.name_key(tenant, new), 0))
        ops.append(o.put(k.name_key(tenant, new), job_id.encode()))
        return cmps, ops

    async def release(self, job_id: str, tenant: str, name: str) -> tuple[list[Compare], list[Op]]:
        """The compares and ops that free ``name`` when its key names this job."""
        o, key = self.kv.ops, self.keys.name_key(tenant, name)
        kv = await self.kv.get(key)
        if kv is None or kv.value.decode() != job_id:
            return [], []  # a job from before names were unique, not the indexed one
        return [o.cmp_mod(key, kv.mod_revision)], [o.delete(key)]

    async def index_existing(self) -> list[Shared]:
        """Gives every stored job without a name key its key, once per store; returns the
        names several jobs share (left out of the index), each logged with how to rename."""
        k, o = self.keys, self.kv.ops
        if await self.kv.get(k.names_indexed_key()) is not None:
            return []
        missing, shared = await self._scan()
        for start in range(0, len(missing), 64):
            ops = [o.txn([o.cmp_create(key, 0)], [o.put(key, jid.encode())], [])
                   for key, jid in missing[start : start + 64]]  # fmt: skip
            await self.kv.txn([], ops)
        for s in shared:
            log.error("job names: %s", s.advice())
        if not shared:
            await self.kv.put(k.names_indexed_key(), b"1")
        return shared

    async def _scan(self) -> tuple[list[tuple[bytes, str]], list[Shared]]:
        """Name keys missing for stored jobs, and names several unindexed jobs share."""
        k = self.keys
        jobs, _ = await self.kv.range_all(k.jobs_prefix(), prefix_end(k.jobs_prefix()))
        names, _ = await self.kv.range_all(k.names_prefix(), prefix_end(k.names_prefix()))
        held = {kv.key: kv.value.decode() for kv in names}
        indexed = set(held.values())
        by_name: dict[bytes, list[tuple[str, str, str]]] = {}
        for kv in jobs:
            tenant, name, jid = _identity(kv)
            if jid not in indexed:
                by_name.setdefault(k.name_key(tenant, name), []).append((tenant, name, jid))
        missing: list[tuple[bytes, str]] = []
        shared: list[Shared] = []
        for key, holders in sorted(by_name.items()):
            ids = [h[2] for h in holders] + ([held[key]] if key in held else [])
            if len(ids) == 1:
                missing.append((key, ids[0]))
            else:
                tenant, name, _ = holders[0]
                shared.append(Shared(tenant, name, sorted(ids)))
        return missing, shared


def _identity(kv: KeyValue) -> tuple[str, str, str]:
    """(tenant, name, id) of a stored job (those fields are never sealed)."""
    job = job_pb2.Job.FromString(kv.value)
    return job.tenant, job.name, job.id


def check_unique_names(jobs: Sequence[job_pb2.Job]) -> dict[int, AlreadyExists]:
    """Jobs of one call that take a name an earlier one of the call takes: by index."""
    first: dict[tuple[str, str], str] = {}
    out: dict[int, AlreadyExists] = {}
    for n, job in enumerate(jobs):
        holder = first.setdefault((job.tenant, job.name), job.id)
        if holder != job.id:
            out[n] = name_taken(job.tenant, job.name, holder)
    return out
