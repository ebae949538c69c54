"""Partition ownership on the memory backend: a claim whose answer is lost is not lost."""

from __future__ import annotations

import asyncio
from typing import Any

from schedd._clock import SystemClock
from schedd._errors import Unavailable
from schedd.coord import (
    Fence,
    Membership,
    NodeInfo,
    OwnershipConfig,
    PartitionOwnership,
    Session,
)
from schedd.store import Keys, MemoryKV


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
    task = asyncio.create_task(ownership.run())
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
        await ownership.release_all()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await membership.close()
        await session.close()
