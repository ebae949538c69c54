"""A node that claims several partitions at once loads them side by side: a takeover of a
dead node's share waits for one round of etcd reads, not one per partition in a row (16
partitions took up to 1.3 s in the cluster benchmark, beyond the TTL + 1 s failover target).
Memory backend, manual clock."""

from __future__ import annotations

import asyncio

from schedd._clock import ManualClock
from schedd.coord import Fence, Membership, NodeInfo, OwnershipConfig, PartitionOwnership, Session
from schedd.store import Keys, MemoryKV

KEYS = Keys(b"/t/")


async def test_partitions_claimed_together_are_loaded_side_by_side() -> None:
    clock = ManualClock(1_000_000)
    kv = MemoryKV(clock=clock)
    session = Session(kv, ttl_s=30, clock=clock)
    await session.start()
    now = clock.now_ms()
    membership = Membership(
        kv, KEYS, session, NodeInfo("a", "a:1", "t", now, now), clock=clock, refresh_s=1.0
    )
    await membership.start()
    loading: set[int] = set()
    most_at_once = 0
    loaded = asyncio.Event()

    async def acquired(fence: Fence) -> None:
        nonlocal most_at_once
        loading.add(fence.partition)
        most_at_once = max(most_at_once, len(loading))
        await loaded.wait()  # an etcd read in flight
        loading.discard(fence.partition)

    async def lost(partition: int, reason: str) -> None:
        pass

    ownership = PartitionOwnership(
        kv, KEYS, session, membership, OwnershipConfig(partitions=6, rebalance_interval_s=0.5),
        on_acquired=acquired, on_lost=lost, clock=clock,
    )  # fmt: skip
    ownership.start()
    try:
        for _ in range(200):
            await asyncio.sleep(0)
            if most_at_once == 6:
                break
        assert most_at_once == 6, f"at most {most_at_once} of 6 partitions loading at once"
        loaded.set()
        for _ in range(200):
            await asyncio.sleep(0)
        assert not loading and sorted(ownership.owned()) == [0, 1, 2, 3, 4, 5]
    finally:
        await ownership.stop(graceful=False)
