"""JobStore and PartitionStore on the memory backend: the client API's and the owner's
transactions hold etcd's rules (one write per key per txn, fencing) without an etcd."""

from __future__ import annotations

import asyncio

import pytest

from schedd._clock import ManualClock
from schedd._errors import FencedOut
from schedd.model import validate_new_job
from schedd.store import FIRE, Fence, JobStore, Keys, MemoryKV, PartitionStore, prefix_end
from schedd.v1 import job_pb2

NOW = 1_700_000_000_000


def _job(job_id: str) -> job_pb2.Job:
    spec = job_pb2.Job(
        id=job_id,
        name=f"hourly-{job_id}",
        schedule=job_pb2.Schedule(expr="@every 1h", timezone="UTC"),
        handler=job_pb2.HandlerTarget(name="noop", queue="q"),
    )
    return validate_new_job(spec, now_ms=NOW, id_factory=lambda: "")


async def test_update_keeping_the_due_key_writes_it_once() -> None:
    kv, keys = MemoryKV(clock=ManualClock(NOW)), Keys(b"/t/")
    jobs = JobStore(kv, keys, partitions=1)
    [created] = await jobs.create_jobs([_job("j1")], NOW)
    assert isinstance(created, tuple) and created[1]
    due_before = (await jobs.read("j1")).state.due_ms

    def rename(job: job_pb2.Job) -> job_pb2.Job:
        job.name = "renamed"
        return job

    # The same schedule from the same instant: the new due key is the old one (etcd would
    # reject a delete and a put of it in one txn; so does the memory backend).
    updated = await jobs.update_job("j1", rename, NOW - 1)
    stored = await jobs.read("j1")
    assert updated.name == "renamed" and stored.state.due_ms == due_before
    due, _ = await kv.range_all(keys.due_prefix(0), prefix_end(keys.due_prefix(0)))
    assert [kv.key for kv in due] == [keys.due_key(0, due_before, "j1")]
    assert await jobs.delete_job("j1", NOW) == 0
    assert await kv.count(keys.prefix, prefix_end(keys.prefix)) == 1  # notify/0 only


async def test_claim_is_fenced_by_the_owner_key_epoch() -> None:
    kv, keys = MemoryKV(clock=ManualClock(NOW)), Keys(b"/t/")
    jobs = JobStore(kv, keys, partitions=1)
    await jobs.create_jobs([_job("j1")], NOW)
    owner = keys.owner_key(0)
    epoch = await kv.put(owner, b"node-a")
    store = PartitionStore(kv, keys, Fence(0, owner, epoch))
    entries, _ = await store.load_due(NOW + 7_200_000)
    [entry] = entries
    assert entry.kind == FIRE
    cached = (await store.fetch_jobs(["j1"]))["j1"]
    item = store.drop_due(entry)
    await kv.delete(owner)
    await kv.put(owner, b"node-b")  # a new owner: a new epoch
    with pytest.raises(FencedOut):
        await store.apply([item])
    assert cached.state.due_ms == entry.due_ms
    current = await kv.get(owner)
    assert current is not None and current.create_revision > epoch
    fresh = PartitionStore(kv, keys, Fence(0, owner, current.create_revision))
    applied = await fresh.apply([fresh.drop_due(entry)])
    assert applied.ok == [True] and applied.revision == kv.revision
    assert await kv.get(keys.due_key(0, entry.due_ms, "j1")) is None


async def test_a_big_create_goes_in_concurrent_transactions_and_keeps_its_order() -> None:
    kv, keys = MemoryKV(clock=ManualClock(NOW)), Keys(b"/t/")
    jobs = JobStore(kv, keys, partitions=4, batch=3)
    batch = [_job(f"j{i}") for i in range(11)]
    batch.insert(5, _job("j2"))  # already in the call: its second create fails alone
    out = await jobs.create_jobs(batch, NOW)
    assert [o[0].id if isinstance(o, tuple) else "error" for o in out] == [
        "j0", "j1", "j2", "j3", "j4", "error", "j5", "j6", "j7", "j8", "j9", "j10"
    ]  # fmt: skip
    assert all(o[1] for o in out if isinstance(o, tuple))
    listed, _ = await jobs.list_jobs(page_size=100)
    assert len(listed) == 11


async def test_a_repeated_idempotency_key_in_one_create_is_won_by_the_first_job() -> None:
    kv, keys = MemoryKV(clock=ManualClock(NOW)), Keys(b"/t/")
    jobs = JobStore(kv, keys, partitions=4, batch=2)
    batch = [_job(f"j{i}") for i in range(6)]
    for n in (1, 4):
        batch[n].idempotency_key = "once"
        batch[n].name = "once"  # the same spec but for the id
    out = await jobs.create_jobs(batch, NOW)
    first, later = out[1], out[4]
    assert isinstance(first, tuple) and first[0].id == "j1" and first[1]
    assert isinstance(later, tuple) and later[0].id == "j1" and not later[1]


async def test_a_nodes_fenced_writes_in_flight_are_bounded_by_its_gate() -> None:
    kv, keys = MemoryKV(clock=ManualClock(NOW)), Keys(b"/t/")
    owner = keys.owner_key(0)
    epoch = await kv.put(owner, b"node-a")
    in_flight = peak = 0
    real_txn = kv.txn

    async def slow_txn(*args: object, **kwargs: object) -> object:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await asyncio.sleep(0.01)
            return await real_txn(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            in_flight -= 1

    kv.txn = slow_txn  # type: ignore[method-assign]
    gate = asyncio.Semaphore(2)
    stores = [
        PartitionStore(kv, keys, Fence(0, owner, epoch), max_items=2, write_gate=gate)
        for _ in range(3)
    ]
    o = kv.ops

    def items(n: int, tag: str) -> list[object]:
        return [o.txn([], [o.put(f"/t/x/{tag}{i}".encode(), b"v")]) for i in range(n)]

    results = await asyncio.gather(*(s.apply(items(5, f"s{n}")) for n, s in enumerate(stores)))
    assert all(all(r.ok) and len(r.ok) == 5 for r in results)
    assert peak == 2  # 9 transactions (3 stores x 3 chunks), never more than 2 at once
    assert await kv.count(b"/t/x/", prefix_end(b"/t/x/")) == 15
