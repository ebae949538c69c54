"""Job names are unique within a tenant (JobStore on the memory backend): creates, batches,
renames and deletes keep the name index true, and jobs from before names were unique are
indexed once, with a name they share reported and refused by lookups."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from schedd._clock import ManualClock
from schedd._errors import AlreadyExists, FailedPrecondition, NotFound
from schedd.model import validate_new_job
from schedd.store import JobStore, Keys, MemoryKV, prefix_end
from schedd.v1 import job_pb2

NOW = 1_700_000_000_000


def _job(job_id: str, name: str, tenant: str = "acme") -> job_pb2.Job:
    spec = job_pb2.Job(
        tenant=tenant,
        name=name,
        schedule=job_pb2.Schedule(expr="@every 1h", timezone="UTC"),
        handler=job_pb2.HandlerTarget(name="noop", queue="q"),
    )
    return validate_new_job(spec, now_ms=NOW, id_factory=lambda: job_id)


def _store() -> tuple[MemoryKV, Keys, JobStore]:
    kv, keys = MemoryKV(clock=ManualClock(NOW)), Keys(b"/t/")
    return kv, keys, JobStore(kv, keys, partitions=2)


def _rename(name: str) -> Callable[[job_pb2.Job], job_pb2.Job]:
    def mutate(job: job_pb2.Job) -> job_pb2.Job:
        job.name = name
        return job

    return mutate


async def test_a_name_is_taken_once_per_tenant() -> None:
    _, _, jobs = _store()
    [ok] = await jobs.create_jobs([_job("j1", "hello")], NOW)
    assert isinstance(ok, tuple) and ok[1]
    [again] = await jobs.create_jobs([_job("j2", "hello")], NOW)
    assert isinstance(again, AlreadyExists)
    assert "job.name: 'hello' is taken in tenant 'acme' by job 'j1'" in str(again)
    [other_tenant] = await jobs.create_jobs([_job("j3", "hello", tenant="bolt")], NOW)
    assert isinstance(other_tenant, tuple)
    assert (await jobs.find_by_name("acme", "hello")).id == "j1"
    assert (await jobs.find_by_name("bolt", "hello")).id == "j3"
    with pytest.raises(NotFound):
        await jobs.find_by_name("acme", "nope")
    with pytest.raises(NotFound):
        await jobs.get_job("j2")  # the refused create changed nothing


async def test_one_call_with_a_name_twice_creates_the_first() -> None:
    _, _, jobs = _store()
    out = await jobs.create_jobs([_job("j1", "a"), _job("j2", "b"), _job("j3", "a")], NOW)
    assert [isinstance(r, tuple) for r in out] == [True, True, False]
    assert isinstance(out[2], AlreadyExists) and "by job 'j1'" in str(out[2])


async def test_renames_and_deletes_move_and_free_names() -> None:
    kv, keys, jobs = _store()
    await jobs.create_jobs([_job("j1", "a"), _job("j2", "b")], NOW)
    with pytest.raises(AlreadyExists, match="'b' is taken"):
        await jobs.update_job("j1", _rename("b"), NOW)
    assert (await jobs.get_job("j1")).name == "a"
    await jobs.update_job("j1", _rename("c"), NOW)
    assert (await jobs.find_by_name("acme", "c")).id == "j1"
    [reuse] = await jobs.create_jobs([_job("j3", "a")], NOW)  # "a" is free again
    assert isinstance(reuse, tuple)
    await jobs.delete_job("j2", NOW)
    [after_delete] = await jobs.create_jobs([_job("j4", "b")], NOW)
    assert isinstance(after_delete, tuple)
    names, _ = await kv.range_all(keys.names_prefix(), prefix_end(keys.names_prefix()))
    assert sorted(kv.value for kv in names) == [b"j1", b"j3", b"j4"]


async def test_jobs_from_before_unique_names_are_indexed_and_shared_names_reported() -> None:
    kv, keys, jobs = _store()
    for job in (_job("j1", "solo"), _job("j2", "twin"), _job("j3", "twin")):
        await kv.put(keys.job_key(job.id), job.SerializeToString())  # as an old node wrote
    with pytest.raises(FailedPrecondition, match="j2, j3 of tenant 'acme' share the name"):
        await jobs.find_by_name("acme", "twin")
    shared = await jobs.names.index_existing()
    assert [(s.name, s.job_ids) for s in shared] == [("twin", ["j2", "j3"])]
    assert "schedctl job update j3 --name twin-2" in shared[0].advice()
    assert await kv.get(keys.name_key("acme", "solo")) is not None
    assert await kv.get(keys.names_indexed_key()) is None  # again at the next start
    with pytest.raises(FailedPrecondition):
        await jobs.find_by_name("acme", "twin")

    await kv.put(keys.job_key("j3"), _job("j3", "twin-2").SerializeToString())  # renamed
    assert await jobs.names.index_existing() == []
    assert await kv.get(keys.names_indexed_key()) is not None
    assert (await jobs.find_by_name("acme", "twin")).id == "j2"
    assert await jobs.names.index_existing() == []  # done once: no scan any more
