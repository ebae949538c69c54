"""Partition ownership on the memory backend: a claim whose answer is lost is not lost."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from schedd._clock import ManualClock, SystemClock
from schedd._errors import Unavailable
from schedd.coord import (
    Fence,
    Membership,
    NodeInfo,
    OwnershipConfig,
    PartitionOwnership,
    Session,
)
from schedd.store import FaultPlan, Keys, MemoryKV


async def test_owner_keys_claimed_by_a_txn_whose_answer_was_lost_are_adopted() -> None:
    clock = SystemClock()
    kv = MemoryKV(clock=clock)
    keys = Keys(b"/t/")
    real_txn = kv.txn
    dropped: list[int] = []

    async def answer_lost_once(compares: Any, success: Any, failure: Any = (), **kw: Any) -> Any:
        result = await real_txn(compares, success, failure, **kw)
        if not dropped and len(success) == 4:  # the first claim of the four partitions
            dropped.append(result.revision)
            raise Unavailable("injected: claim applied, answer lost")
        return result

    kv.txn = answer_lost_once  # type: ignore[method-assign]
    session = Session(kv, ttl_s=5, clock=clock)
    await session.start()
    now = clock.now_ms()
    membership = Membership(kv, keys, session, NodeInfo("n1", "x:1", "t", now, now), clock=clock)
    await membership.start()
    acquired: list[Fence] = []

    async def on_acquired(fence: Fence) -> None:
        acquired.append(fence)

    async def on_lost(partition: int, reason: str) -> None:
        raise AssertionError(f"partition {partition} lost: {reason}")

    ownership = PartitionOwnership(
        kv,
        keys,
        session,
        membership,
        OwnershipConfig(partitions=4, rebalance_interval_s=0.05),
        on_acquired=on_acquired,
        on_lost=on_lost,
        clock=clock,
    )
    ownership.start()
    try:
        for _ in range(200):
            if len(ownership.owned()) == 4:
                break
            await asyncio.sleep(0.01)
        assert dropped, "the fault was injected"
        assert sorted(ownership.owned()) == [0, 1, 2, 3]
        # Adopted under the epoch etcd gave them: the revision of the claim whose answer died.
        assert {f.epoch for f in acquired} == {dropped[0]}
    finally:
        await ownership.stop(graceful=True)
        await membership.stop()
        await session.stop()


async def _turns(n: int = 100) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_released_partition_is_not_adopted_back_from_a_lagging_mirror() -> None:
    """A release whose delete applied but whose answer was lost is retried; once the retry
    got through, the owners mirror (its watch broken, re-lists failing) may still show the
    old key with this node's lease. That is this node's own release, not a claim whose
    answer was lost: adopting it would report a partition the node does not own."""
    clock = ManualClock(1_000_000)
    kv = MemoryKV(clock=clock)
    keys = Keys(b"/t/")
    session = Session(kv, ttl_s=30, clock=clock)
    await session.start()
    now = clock.now_ms()
    info = NodeInfo("n1", "x:1", "t", now, now)
    membership = Membership(kv, keys, session, info, clock=clock)
    await membership.start()
    acquired: list[Fence] = []

    async def on_acquired(fence: Fence) -> None:
        acquired.append(fence)

    async def on_lost(partition: int, reason: str) -> None:
        pass

    ownership = PartitionOwnership(
        kv,
        keys,
        session,
        membership,
        OwnershipConfig(partitions=2, rebalance_interval_s=1.0),
        on_acquired=on_acquired,
        on_lost=on_lost,
        clock=clock,
    )
    ownership.start()
    try:
        await _turns()
        assert sorted(ownership.owned()) == [0, 1]
        kv.faults = FaultPlan(random.Random(1), fail_after=1.0, break_watches=1.0, fail_reads=1.0)
        with pytest.raises(Unavailable):
            await ownership.release(0, "test")  # deleted, answer lost; the mirror breaks
        await _turns()
        kv.faults = FaultPlan(random.Random(1), break_watches=1.0, fail_reads=1.0)
        clock.advance(1.0)  # the next round retries the delete, which now gets through
        await _turns()
        assert sorted(ownership.owned()) == [1]
        assert [f.partition for f in acquired] == [0, 1]
        kv.faults = None
        assert await kv.get(keys.owner_key(0)) is None
    finally:
        kv.faults = None
        await ownership.stop(graceful=False)
        await membership.stop()
        await session.stop()
