"""A node joining peers takes its share only once the workers streaming to them stream to it
too (or after ``join_wait_s``): an execution running on a worker when its partition moves is
found by the new owner's probe only over a stream; otherwise it is handed out again and runs a
second time. Memory backend, manual clock."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from schedd._clock import ManualClock
from schedd.coord import Fence, Membership, NodeInfo, OwnershipConfig, PartitionOwnership, Session
from schedd.store import Keys, MemoryKV

KEYS = Keys(b"/t/")


@dataclass
class SimNode:
    node_id: str
    workers: set[str] = field(default_factory=set)
    ownership: PartitionOwnership | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def owned(self) -> list[int]:
        assert self.ownership is not None
        return sorted(self.ownership.owned())


async def _start(kv: MemoryKV, clock: ManualClock, node: SimNode, join_wait_s: float) -> None:
    session = Session(kv, ttl_s=30, clock=clock)
    await session.start()
    now = clock.now_ms()
    info = NodeInfo(node.node_id, f"{node.node_id}:1", "t", now, now)
    membership = Membership(
        kv, KEYS, session, info, clock=clock, refresh_s=1.0, workers=lambda: node.workers
    )
    await membership.start()

    async def acquired(fence: Fence) -> None:
        pass

    async def lost(partition: int, reason: str) -> None:
        pass

    config = OwnershipConfig(partitions=4, rebalance_interval_s=0.5, join_wait_s=join_wait_s)
    node.ownership = PartitionOwnership(
        kv, KEYS, session, membership, config, on_acquired=acquired, on_lost=lost, clock=clock
    )
    node.ownership.start()


async def _run_for(clock: ManualClock, seconds: float) -> None:
    for _ in range(int(seconds / 0.1)):
        clock.advance(0.1)
        for _ in range(50):
            await asyncio.sleep(0)


async def _stop(*nodes: SimNode) -> None:
    for n in nodes:
        if n.ownership is not None:
            await n.ownership.stop(graceful=False)
        for t in n.tasks:
            t.cancel()
        await asyncio.gather(*n.tasks, return_exceptions=True)


async def test_a_joiner_waits_for_its_peers_workers_then_takes_its_share() -> None:
    clock = ManualClock(1_000_000)
    kv = MemoryKV(clock=clock)
    a, b = SimNode("a", {"w0", "w1"}), SimNode("b")
    await _start(kv, clock, a, join_wait_s=5.0)
    await _run_for(clock, 2.0)
    assert a.owned() == [0, 1, 2, 3]
    await _start(kv, clock, b, join_wait_s=5.0)
    try:
        await _run_for(clock, 2.0)
        assert b.owned() == [] and a.owned() == [0, 1, 2, 3]
        assert b.ownership is not None and "w0, w1" in b.ownership.join_reason
        b.workers |= {"w0"}
        await _run_for(clock, 1.0)
        assert b.owned() == []  # w1 is still missing
        b.workers |= {"w1"}
        await _run_for(clock, 2.0)
        assert len(b.owned()) == 2 and len(a.owned()) == 2
        assert b.ownership.join_reason == ""
    finally:
        await _stop(a, b)


async def test_a_joiner_takes_its_share_anyway_after_join_wait() -> None:
    clock = ManualClock(1_000_000)
    kv = MemoryKV(clock=clock)
    a, b = SimNode("a", {"w0"}), SimNode("b")
    await _start(kv, clock, a, join_wait_s=3.0)
    await _run_for(clock, 2.0)
    await _start(kv, clock, b, join_wait_s=3.0)
    try:
        await _run_for(clock, 2.0)
        assert b.owned() == []
        await _run_for(clock, 3.0)  # w0 never comes (frozen, or cut off from this node)
        assert len(b.owned()) == 2
    finally:
        await _stop(a, b)


async def test_the_first_node_and_nodes_without_workers_do_not_wait() -> None:
    clock = ManualClock(1_000_000)
    kv = MemoryKV(clock=clock)
    a, b = SimNode("a"), SimNode("b")
    await _start(kv, clock, a, join_wait_s=60.0)
    await _run_for(clock, 1.0)
    assert a.owned() == [0, 1, 2, 3]
    await _start(kv, clock, b, join_wait_s=60.0)
    try:
        await _run_for(clock, 3.0)
        assert len(b.owned()) == 2
    finally:
        await _stop(a, b)
