"""coord speaks start()/stop(graceful, timeout) like the rest of schedd (memory backend)."""

from __future__ import annotations

import asyncio

from schedd._clock import SystemClock
from schedd.coord import Fence, Membership, NodeInfo, OwnershipConfig, PartitionOwnership, Session
from schedd.store import Keys, MemoryKV, prefix_end


async def _parts(kv: MemoryKV, keys: Keys) -> tuple[Session, Membership, PartitionOwnership]:
    clock = SystemClock()
    session = Session(kv, ttl_s=5, clock=clock)
    await session.start()
    now = clock.now_ms()
    members = Membership(kv, keys, session, NodeInfo("n1", "x:1", "t", now, now), clock=clock)
    await members.start()
    lost: list[tuple[int, str]] = []

    async def on_acquired(fence: Fence) -> None:
        pass

    async def on_lost(partition: int, reason: str) -> None:
        lost.append((partition, reason))

    owner = PartitionOwnership(
        kv,
        keys,
        session,
        members,
        OwnershipConfig(partitions=4, rebalance_interval_s=0.05),
        on_acquired=on_acquired,
        on_lost=on_lost,
        clock=clock,
    )
    return session, members, owner


async def _count(kv: MemoryKV, prefix: bytes) -> int:
    return await kv.count(prefix, prefix_end(prefix))


async def _until_owned(owner: PartitionOwnership, n: int) -> None:
    for _ in range(300):
        if len(owner.owned()) == n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"owned {sorted(owner.owned())}, not {n}")


async def test_a_graceful_stop_releases_every_partition_and_deletes_every_key() -> None:
    kv, keys = MemoryKV(clock=SystemClock()), Keys(b"/t/")
    session, members, owner = await _parts(kv, keys)
    owner.start()
    await _until_owned(owner, 4)
    await owner.stop(graceful=True, timeout=5)
    await asyncio.wait_for(owner.wait(), 1)  # the reconcile task has ended
    assert owner.owned() == {} and await _count(kv, keys.owners_prefix()) == 0
    await members.stop(graceful=True, timeout=5)
    assert await _count(kv, keys.nodes_prefix()) == 0
    await session.stop(graceful=True, timeout=5)
    assert session.done.is_set()


async def test_an_abrupt_stop_leaves_the_keys_to_the_session_lease() -> None:
    kv, keys = MemoryKV(clock=SystemClock()), Keys(b"/t/")
    session, members, owner = await _parts(kv, keys)
    owner.start()
    await _until_owned(owner, 4)
    await owner.stop(graceful=False)
    await members.stop(graceful=False)
    await session.stop(graceful=False)
    assert session.done.is_set()
    # Nothing deleted, nothing revoked: the lease's expiry takes them.
    assert await _count(kv, keys.owners_prefix()) == 4
    assert await _count(kv, keys.nodes_prefix()) == 1
