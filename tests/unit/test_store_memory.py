"""What only the memory backend has: injected faults and a manual clock driving leases."""

from __future__ import annotations

import asyncio
import random

import pytest

from schedd._clock import ManualClock
from schedd._errors import Unavailable
from schedd.store import FaultPlan, MemoryKV, WatchEvent


async def test_fault_before_applies_nothing_fault_after_applies_and_raises() -> None:
    kv = MemoryKV()
    kv.faults = FaultPlan(random.Random(1), fail_before=1.0)
    with pytest.raises(Unavailable, match="not applied"):
        await kv.put(b"a", b"1")
    assert kv.revision == 1
    kv.faults = FaultPlan(random.Random(1), fail_after=1.0)
    with pytest.raises(Unavailable, match="answer lost"):
        await kv.txn([], [kv.ops.put(b"a", b"1")])
    kv.faults = None
    found = await kv.get(b"a")
    assert found is not None and found.mod_revision == kv.revision == 2


async def test_a_seeded_fault_plan_replays_exactly() -> None:
    async def run(seed: int) -> list[bool]:
        kv = MemoryKV()
        kv.faults = FaultPlan(random.Random(seed), fail_before=0.3, fail_after=0.3, fail_reads=0.3)
        outcomes = []
        for i in range(40):
            try:
                await kv.put(b"k%d" % i, b"v")
                await kv.get(b"k%d" % i)
                outcomes.append(True)
            except Unavailable:
                outcomes.append(False)
        return outcomes

    first = await run(7)
    assert first == await run(7)
    assert True in first and False in first


async def test_a_broken_watch_raises_and_a_new_watch_resumes_where_it_broke() -> None:
    kv = MemoryKV()
    await kv.put(b"a", b"1")
    kv.faults = FaultPlan(random.Random(1), break_watches=1.0)
    with pytest.raises(Unavailable, match="watch stream broke"):
        async for _ in kv.watch(b"a", b"b", 2):
            raise AssertionError("a batch was delivered")
    kv.faults = None
    async for batch in kv.watch(b"a", b"b", 2):
        assert batch.revision == 2
        break


async def test_expiry_on_a_manual_clock_reaches_a_waiting_watch() -> None:
    clock = ManualClock(0)
    kv = MemoryKV(clock=clock)
    lease = await kv.grant(3)
    rev = await kv.put(b"n/1", b"up", lease=lease)
    seen: list[WatchEvent] = []

    async def watch() -> None:
        async for batch in kv.watch(b"n/", b"n0", rev + 1):
            seen.extend(batch.events)
            return

    async def settle() -> None:  # let the watch reach its wait (and arm its clock timer)
        for _ in range(5):
            await asyncio.sleep(0)

    task = asyncio.create_task(watch())
    await settle()
    clock.advance(2.9)
    await settle()
    assert not seen
    clock.advance(0.2)  # no store call in between: the watch itself notices
    async with asyncio.timeout(1):
        await task
    assert [(e.kind, e.kv.key, e.kv.mod_revision) for e in seen] == [("delete", b"n/1", rev + 1)]


async def test_a_closed_store_is_unavailable() -> None:
    kv = MemoryKV()
    await kv.close()
    with pytest.raises(Unavailable):
        await kv.get(b"a")
