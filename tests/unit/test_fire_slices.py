"""Fire slices: past ``fire_slice`` fires on one loop pass, further partitions fire a pass later.

Real event loop, no sleeps with time in them: each pass is one ``asyncio.sleep(0)`` turn.
"""

from __future__ import annotations

import asyncio

from unit.partition_kit import Outbox, config, live, own

from schedd._clock import ManualClock
from schedd.node._fire_policy import FirePolicy, FireSlices
from schedd.node._partition import Partition
from schedd.store import MemoryKV


async def test_a_lone_fire_never_waits_and_the_count_restarts_each_pass() -> None:
    slices = FireSlices(512)
    for _ in range(3):
        assert not slices.full()
        slices.used(1)
        await asyncio.sleep(0)  # the next pass: count reset
    slices.used(600)
    assert slices.full()
    await asyncio.sleep(0)
    assert not slices.full()
    assert not FireSlices(0).full()  # 0: no limit


async def test_partitions_beyond_the_slice_fire_after_what_the_first_ones_woke() -> None:
    slices = FireSlices(512)
    order: list[str] = []
    woke = asyncio.Event()

    async def writer() -> None:
        await woke.wait()  # like the stream writer woken by the first flush
        order.append("write")

    async def partition(name: str, n: int) -> None:
        while slices.full():
            await slices.next_pass()
        slices.used(n)
        order.append(name)
        woke.set()

    w = asyncio.ensure_future(writer())
    await asyncio.sleep(0)  # the writer waits
    await asyncio.gather(*(partition(f"p{i}", 300) for i in range(5)))
    await w
    # pass 1: p0 and p1 (600 >= 512); the writer woken by p0 runs before p2 and p3
    assert order == ["p0", "p1", "write", "p2", "p3", "p4"]


async def _two_partitions(fire_slice: int) -> tuple[Partition, Partition, Outbox]:
    clock = ManualClock(0)
    cfg = config(fire_slice=fire_slice, partitions=2)
    policy = FirePolicy(cfg, clock)  # the node's: its slices count every partition's fires
    out = Outbox()
    kv = MemoryKV(clock=clock)
    parts = [await own(kv, clock, None, cfg, partition=p, policy=policy, outbound=out)
             for p in (0, 1)]  # fmt: skip
    return parts[0], parts[1], out


async def test_a_waiting_partition_drops_what_left_it_meanwhile() -> None:
    p1, p2, out = await _two_partitions(fire_slice=2)
    first = [live(p1, "a@1"), live(p1, "b@1")]
    second = [live(p2, "c@1"), live(p2, "d@1"), live(p2, "e@1")]
    t1 = asyncio.ensure_future(p1.fire(first))
    t2 = asyncio.ensure_future(p2.fire(second))
    await asyncio.sleep(0)  # pass 1: p1 fires its two, p2 waits
    assert out.sent == ["a@1", "b@1"]
    del p2.live["d@1"]  # cancelled (or its job deleted) while p2 waited
    second[2].dispatched = True  # dispatched by another path meanwhile
    await asyncio.gather(t1, t2)
    assert out.sent == ["a@1", "b@1", "c@1"]
    assert p1.running.by_job == {"a": "a@1", "b": "b@1"}
    assert p2.running.by_job == {"c": "c@1"}


async def test_one_partition_beyond_the_slice_fires_a_slice_per_pass() -> None:
    p, _, out = await _two_partitions(fire_slice=2)
    lives = [live(p, f"j{i}@1") for i in range(5)]
    task = asyncio.ensure_future(p.fire(lives))
    seen = []
    for _ in range(4):
        await asyncio.sleep(0)
        seen.append(len(out.sent))
    await task
    assert seen == [2, 4, 5, 5]  # one slice of two per pass
    assert out.sent == [f"j{i}@1" for i in range(5)]
