"""schedd.coord against a real etcd: sessions, cluster meta, membership, ownership, fencing."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from schedd._clock import SystemClock
from schedd.coord import (
    FORMAT_VERSION,
    Fence,
    Membership,
    NodeInfo,
    OwnershipConfig,
    PartitionOwnership,
    Session,
    init_cluster,
    preference_order,
)
from schedd.store import EtcdKV, Keys

P = 8


async def eventually(
    predicate: Callable[[], bool | Awaitable[bool]], *, timeout_s: float = 15.0, what: str = ""
) -> None:
    """Polls ``predicate`` until it holds; fails the test at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout_s}s: {what}")
        await asyncio.sleep(0.05)


class SkewedClock(SystemClock):
    """The real clock, off by ``offset_ms`` on the wall-clock reading only."""

    def __init__(self, offset_ms: int) -> None:
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return super().now_ms() + self.offset_ms


@dataclass
class Ledger:
    """Who uses which partition, in event order; records every broken invariant."""

    etcd: EtcdKV
    holders: dict[int, str] = field(default_factory=dict)
    events: list[tuple[str, str, int, str]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    graceful_checks: int = 0

    async def acquired(self, node: str, fence: Fence) -> None:
        other = self.holders.get(fence.partition)
        if other is not None:
            self.violations.append(f"{node} acquired {fence.partition} while {other} holds it")
        self.holders[fence.partition] = node
        self.events.append(("acquired", node, fence.partition, str(fence.epoch)))

    async def lost(self, node: str, partition: int, reason: str, fence: Fence | None) -> None:
        if self.holders.get(partition) == node:
            del self.holders[partition]
        self.events.append(("lost", node, partition, reason))
        if reason in ("rebalance", "shutdown") and fence is not None:
            self.graceful_checks += 1
            kv = await self.etcd.get(fence.key)  # graceful: the key must still be ours
            if kv is None or kv.create_revision != fence.epoch:
                self.violations.append(f"{node} lost {partition} after its key was deleted")


class Node:
    """One coordinating node: session, membership, ownership, running in the background."""

    def __init__(
        self,
        etcd: EtcdKV,
        keys: Keys,
        ledger: Ledger,
        node_id: str,
        *,
        clock: SystemClock | None = None,
        partitions: int = P,
    ) -> None:
        self.node_id = node_id
        self.clock = clock or SystemClock()
        self.ledger = ledger
        self.session = Session(etcd, ttl_s=2, clock=self.clock)
        now = self.clock.now_ms()
        info = NodeInfo(node_id, f"127.0.0.1:{hash(node_id) % 1000 + 9000}", "test", now, now)
        self.membership = Membership(
            etcd, keys, self.session, info, clock=self.clock, refresh_s=0.3
        )
        self.ownership = PartitionOwnership(
            etcd,
            keys,
            self.session,
            self.membership,
            OwnershipConfig(partitions=partitions, rebalance_interval_s=0.2),
            on_acquired=self._acquired,
            on_lost=self._lost,
        )
        self.lost_reasons: list[str] = []
        self.fences: dict[int, Fence] = {}

    async def _acquired(self, fence: Fence) -> None:
        self.fences[fence.partition] = fence
        await self.ledger.acquired(self.node_id, fence)

    async def _lost(self, partition: int, reason: str) -> None:
        self.lost_reasons.append(reason)
        await self.ledger.lost(self.node_id, partition, reason, self.fences.pop(partition, None))

    async def start(self) -> Node:
        await self.session.start()
        await self.membership.start()
        self.ownership.start()
        return self

    def owned(self) -> set[int]:
        return set(self.ownership.owned())

    async def stop(self) -> None:
        with contextlib.suppress(Exception):
            await self.ownership.stop(graceful=True, timeout=5.0)
        await self.ownership.stop(graceful=False)
        await self.membership.stop()
        await self.session.stop()


@pytest.fixture
def keys(etcd_prefix: bytes) -> Keys:
    return Keys(etcd_prefix)


# -- session --------------------------------------------------------------------------------


async def test_session_outlives_its_ttl_and_close_revokes(etcd: EtcdKV, keys: Keys) -> None:
    session = Session(etcd, ttl_s=2)
    await session.start()
    key = keys.prefix + b"attached"
    await etcd.put(key, b"x", lease=session.lease_id)
    await asyncio.sleep(5)  # 2.5 TTLs: only keep-alives keep the lease
    assert not session.done.is_set()
    assert await etcd.get(key) is not None
    await session.stop()
    assert session.done.is_set()
    assert await etcd.get(key) is None


async def test_session_done_when_lease_revoked_behind_its_back(etcd: EtcdKV) -> None:
    session = Session(etcd, ttl_s=2)
    await session.start()
    await etcd.revoke(session.lease_id)
    await eventually(session.done.is_set, timeout_s=5, what="session.done after revoke")
    await session.stop()  # still safe


# -- cluster meta ---------------------------------------------------------------------------


async def test_init_cluster_is_create_once(
    etcd: EtcdKV, keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    first = await init_cluster(etcd, keys, 8)
    assert first.partitions == 8 and first.format_version == FORMAT_VERSION == 2
    again = await init_cluster(etcd, keys, 8)
    assert again == first
    with caplog.at_level(logging.WARNING, logger="schedd.coord._meta"):
        other = await init_cluster(etcd, keys, 16)
    assert other == first
    assert "16 ignored" in caplog.text
    raced = await asyncio.gather(
        *(init_cluster(etcd, Keys(keys.prefix + b"r/"), 4) for _ in range(5))
    )
    assert len({m.cluster_id for m in raced}) == 1


# -- membership -----------------------------------------------------------------------------


async def test_membership_sees_peers_come_and_go(etcd: EtcdKV, keys: Keys) -> None:
    ledger = Ledger(etcd)
    a = await Node(etcd, keys, ledger, "node-a").start()
    b = await Node(etcd, keys, ledger, "node-b").start()
    try:
        await eventually(lambda: set(a.membership.live_nodes()) == {"node-a", "node-b"})
        await eventually(lambda: a.membership.clock_skew_ms() is not None, what="skew sample")
        skew = a.membership.clock_skew_ms()
        assert skew is not None and abs(skew) < 200
        await etcd.revoke(b.session.lease_id)
        await eventually(lambda: set(a.membership.live_nodes()) == {"node-a"}, what="b left")
    finally:
        await b.stop()
        await a.stop()


# -- ownership ------------------------------------------------------------------------------


def test_preference_order_spreads_nodes() -> None:
    firsts = {preference_order(f"node-{i}", list(range(64)), set())[0] for i in range(8)}
    assert len(firsts) > 1
    assert preference_order("n", [3, 1, 2], set()) == preference_order("n", [1, 2, 3], set())


async def test_ownership_split_takeover_fencing_release(etcd: EtcdKV, keys: Keys) -> None:
    ledger = Ledger(etcd)
    a = await Node(etcd, keys, ledger, "node-a").start()
    b: Node | None = None
    try:
        await eventually(lambda: a.owned() == set(range(P)), what="a owns all")
        # All free partitions were claimed in one batched txn: one epoch.
        assert len({f.epoch for f in a.ownership.owned().values()}) == 1

        b = await Node(etcd, keys, ledger, "node-b").start()
        await eventually(lambda: len(a.owned()) == len(b.owned()) == P // 2, what="even split a/b")
        assert a.owned().isdisjoint(b.owned())
        assert "rebalance" in a.lost_reasons
        assert ledger.graceful_checks >= P // 2  # each handover was checked before its delete
        assert ledger.violations == []
        status = await a.ownership.partitions_status()
        assert {owner for _, owner, _ in status} == {"node-a", "node-b"}

        old = b.ownership.owned()
        before = len(b.lost_reasons)
        await etcd.revoke(b.session.lease_id)  # b dies
        await eventually(lambda: a.owned() == set(range(P)), what="a takes b's orphans")
        zombie = b
        await asyncio.wait_for(zombie.ownership.wait(), 15)  # b's ownership stops
        assert b.owned() == set()
        # b learns it lost each partition either from the owners watch or from its session.
        assert len(b.lost_reasons) - before == len(old)
        assert set(b.lost_reasons[before:]) <= {"fenced out", "session lost"}
        new = a.ownership.owned()
        for p, fence in old.items():
            assert new[p].epoch > fence.epoch
        # The zombie's write, guarded by its old fence, fails; the new owner's succeeds.
        p, stale = next(iter(old.items()))
        guarded = keys.prefix + b"guarded"
        resp = await etcd.txn([stale.compare(etcd.ops)], [etcd.ops.put(guarded, b"zombie")])
        assert not resp.succeeded
        resp = await etcd.txn([new[p].compare(etcd.ops)], [etcd.ops.put(guarded, b"owner")])
        assert resp.succeeded

        await a.ownership.stop(graceful=True)
        assert a.owned() == set()
        status = await a.ownership.partitions_status()
        assert all(owner == "" and epoch == 0 for _, owner, epoch in status)
        assert ledger.violations == []
    finally:
        if b is not None:
            await b.stop()
        await a.stop()


async def test_three_nodes_share_sixteen_partitions(etcd: EtcdKV, keys: Keys) -> None:
    ledger = Ledger(etcd)
    nodes = [await Node(etcd, keys, ledger, f"node-{i}", partitions=16).start() for i in range(3)]
    try:

        def balanced() -> bool:
            counts = sorted(len(n.owned()) for n in nodes)
            return sum(counts) == 16 and counts[-1] <= 6 and counts[0] >= 4

        await eventually(balanced, what="16 partitions over 3 nodes")
        owned = [n.owned() for n in nodes]
        assert set().union(*owned) == set(range(16))
        assert sum(len(o) for o in owned) == 16
        assert ledger.violations == []
    finally:
        for n in nodes:
            await n.stop()
    assert ledger.holders == {}


async def test_skewed_node_owns_nothing(etcd: EtcdKV, keys: Keys) -> None:
    ledger = Ledger(etcd)
    a = await Node(etcd, keys, ledger, "node-a").start()
    b = await Node(etcd, keys, ledger, "node-b").start()
    c: Node | None = None
    try:
        await eventually(lambda: len(a.owned()) == len(b.owned()) == P // 2, what="a/b split")
        c = await Node(etcd, keys, ledger, "node-c", clock=SkewedClock(3_000)).start()
        await eventually(
            lambda: (c.membership.clock_skew_ms() or 0) > 2_000, what="c measures its skew"
        )
        await eventually(
            lambda: not a.membership.live_nodes()["node-c"].eligible, what="c ineligible"
        )
        # Let a few rebalance rounds pass: c must keep owning nothing, a and b keep 4 each.
        for _ in range(10):
            await asyncio.sleep(0.1)
            assert c.owned() == set()
        assert len(a.owned()) == len(b.owned()) == P // 2
        assert not any(node == "node-c" for kind, node, _, _ in ledger.events)
        skew_a = a.membership.clock_skew_ms()
        assert skew_a is not None and abs(skew_a) < 200
    finally:
        if c is not None:
            await c.stop()
        await b.stop()
        await a.stop()
