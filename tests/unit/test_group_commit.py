"""Group commit on the memory store (etcd's transaction semantics, its duplicate-key rule):
partitions' fenced batches that come together go in one transaction, and each batch learns
what it would have learnt alone: written, fenced out, refused, or an unknown outcome."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest

from schedd._errors import FencedOut, Unavailable
from schedd.store import (
    Fence,
    GroupCommit,
    Item,
    Keys,
    MemoryKV,
    PartitionStore,
    TxnRejected,
    prefix_end,
)
from schedd.store.memory import FaultPlan

KEYS = Keys(b"/g/")


async def _fences(kv: MemoryKV, n: int) -> list[Fence]:
    out = []
    for p in range(n):
        key = KEYS.owner_key(p)
        out.append(Fence(p, key, await kv.put(key, b"n")))
    return out


def _puts(kv: MemoryKV, *keys: bytes) -> list[Item]:
    """One item per key: put it, if it does not exist yet."""
    o = kv.ops
    return [Item(o.txn([o.cmp_create(k, 0)], [o.put(k, b"v")])) for k in keys]


async def _stored(kv: MemoryKV) -> list[bytes]:
    kvs, _ = await kv.range_all(b"/g/x/", prefix_end(b"/g/x/"))
    return [x.key for x in kvs]


async def test_batches_that_come_together_go_in_one_transaction() -> None:
    kv = MemoryKV()
    a, b, c = await _fences(kv, 3)
    await kv.put(b"/g/x/old", b"v")
    group = GroupCommit(kv, linger_ms=0)
    got = await asyncio.gather(
        group.commit(a, _puts(kv, b"/g/x/a1", b"/g/x/a2")),
        group.commit(b, _puts(kv, b"/g/x/b1")),
        group.commit(c, _puts(kv, b"/g/x/c1", b"/g/x/old")),  # old exists: its compare fails
    )
    assert (group.transactions, group.batches) == (1, 3)
    assert [g.succeeded for g in got] == [True, True, True]
    assert [g.outcomes for g in got] == [[True, True], [True], [True, False]]
    assert len({g.revision for g in got}) == 1 and got[0].revision > 0
    assert await _stored(kv) == [b"/g/x/a1", b"/g/x/a2", b"/g/x/b1", b"/g/x/c1", b"/g/x/old"]


async def test_a_fenced_out_batch_learns_it_alone_and_the_others_are_written() -> None:
    kv = MemoryKV()
    a, b = await _fences(kv, 2)
    await kv.delete(b.key)  # b's owner lost the partition
    await kv.put(b.key, b"other")  # a new owner: a new epoch
    group = GroupCommit(kv, linger_ms=0)
    got = await asyncio.gather(
        group.commit(a, _puts(kv, b"/g/x/a1")), group.commit(b, _puts(kv, b"/g/x/b1"))
    )
    assert [g.succeeded for g in got] == [True, False]
    assert got[0].outcomes == [True]
    assert await _stored(kv) == [b"/g/x/a1"]  # nothing of the zombie's
    assert group.transactions == 3  # the joint one (which wrote nothing), then each alone


async def test_a_malformed_batch_is_refused_alone() -> None:
    kv = MemoryKV()
    a, b = await _fences(kv, 2)
    o = kv.ops
    twice = [Item(o.txn([], [o.put(b"/g/x/bad", b"1"), o.put(b"/g/x/bad", b"2")]))]
    group = GroupCommit(kv, linger_ms=0)
    good, bad = await asyncio.gather(
        group.commit(a, _puts(kv, b"/g/x/a1")), group.commit(b, twice), return_exceptions=True
    )
    assert not isinstance(good, BaseException) and good.outcomes == [True]
    assert isinstance(bad, TxnRejected)
    assert await _stored(kv) == [b"/g/x/a1"]


async def test_two_batches_writing_one_key_are_each_sent_alone() -> None:
    """Never so between partitions (their keys are their own), but two batches of one
    partition may meet in a group: together they are malformed, alone each is not."""
    kv = MemoryKV()
    [a] = await _fences(kv, 1)
    group = GroupCommit(kv, linger_ms=0)
    first, second = await asyncio.gather(
        group.commit(a, _puts(kv, b"/g/x/k")), group.commit(a, _puts(kv, b"/g/x/k"))
    )
    assert (first.outcomes, second.outcomes) == ([True], [False])  # as if one after the other
    assert group.transactions == 3


async def test_an_unknown_outcome_reaches_every_batch_of_the_group() -> None:
    kv = MemoryKV()
    a, b = await _fences(kv, 2)
    kv.faults = FaultPlan(random.Random(1), fail_before=1.0)
    group = GroupCommit(kv, linger_ms=0)
    got = await asyncio.gather(
        group.commit(a, _puts(kv, b"/g/x/a1")),
        group.commit(b, _puts(kv, b"/g/x/b1")),
        return_exceptions=True,
    )
    assert all(isinstance(g, Unavailable) for g in got)
    assert group.transactions == 1


async def test_a_full_group_goes_at_once_and_a_large_batch_goes_alone() -> None:
    kv = MemoryKV()
    a, b = await _fences(kv, 2)
    group = GroupCommit(kv, linger_ms=60_000, max_items=3)  # the linger would never end
    got = await asyncio.wait_for(
        asyncio.gather(
            group.commit(a, _puts(kv, b"/g/x/a1", b"/g/x/a2")),
            group.commit(b, _puts(kv, b"/g/x/b1")),  # 3 items: the group is full
        ),
        timeout=5,
    )
    assert [g.outcomes for g in got] == [[True, True], [True]] and group.transactions == 1
    big = await asyncio.wait_for(
        group.commit(a, _puts(kv, *(b"/g/x/c%d" % i for i in range(3)))), 5
    )
    assert big.outcomes == [True] * 3 and group.transactions == 2


async def test_the_linger_gathers_batches_that_come_within_it() -> None:
    kv = MemoryKV()
    a, b = await _fences(kv, 2)
    group = GroupCommit(kv, linger_ms=50)

    async def later(fence: Fence, keys: Sequence[bytes], delay_s: float) -> bool:
        await asyncio.sleep(delay_s)
        return (await group.commit(fence, _puts(kv, *keys))).succeeded

    assert await asyncio.gather(later(a, [b"/g/x/a1"], 0), later(b, [b"/g/x/b1"], 0.01))
    assert (group.transactions, group.batches) == (1, 2)


async def test_partition_stores_sharing_a_group_commit_keep_their_fences_and_refusals() -> None:
    kv = MemoryKV()
    a, b = await _fences(kv, 2)
    group = GroupCommit(kv, linger_ms=0)
    sa = PartitionStore(kv, KEYS, a, committer=group)
    sb = PartitionStore(kv, KEYS, b, committer=group)
    o = kv.ops
    bad = Item(o.txn([], [o.put(b"/g/x/bad", b"1"), o.put(b"/g/x/bad", b"2")]))
    got_a, got_b = await asyncio.gather(
        sa.apply([*_puts(kv, b"/g/x/a1"), bad, *_puts(kv, b"/g/x/a2")]),
        sb.apply(_puts(kv, b"/g/x/b1")),
    )
    assert got_a.ok == [True, False, True] and list(got_a.rejected) == [1]
    assert got_b.ok == [True]
    assert await _stored(kv) == [b"/g/x/a1", b"/g/x/a2", b"/g/x/b1"]
    await kv.delete(b.key)
    with pytest.raises(FencedOut):
        await sb.apply(_puts(kv, b"/g/x/b2"))


async def test_a_caller_that_stops_waiting_leaves_the_others_their_answers() -> None:
    """A partition that stops while its write is in flight cancels its wait: the group's
    other batches still hear theirs (before, the first cancelled one raised in the group's
    task and left the rest waiting for ever), in a group and alone."""
    kv = MemoryKV()
    a, b, c = await _fences(kv, 3)
    group = GroupCommit(kv, linger_ms=5)
    gone = asyncio.ensure_future(group.commit(a, _puts(kv, b"/g/x/a1")))
    stays = asyncio.ensure_future(group.commit(b, _puts(kv, b"/g/x/b1")))
    await asyncio.sleep(0)
    gone.cancel()
    got = await asyncio.wait_for(stays, 2)
    assert got.succeeded and got.outcomes == [True]
    alone = asyncio.ensure_future(group.commit(c, _puts(kv, b"/g/x/c1")))
    await asyncio.sleep(0)
    alone.cancel()
    after = await asyncio.wait_for(group.commit(b, _puts(kv, b"/g/x/b2")), 2)
    assert after.succeeded
    await asyncio.sleep(0.02)  # the cancelled lone batch's task ended without an error
    assert await _stored(kv) == [b"/g/x/a1", b"/g/x/b1", b"/g/x/b2", b"/g/x/c1"]
