"""Fire slices: past ``fire_slice`` fires on one loop pass, further partitions fire a pass later.

Real event loop, no sleeps with time in them: each pass is one ``asyncio.sleep(0)`` turn.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from schedd._clock import ManualClock
from schedd.node._config import NodeConfig
from schedd.node._firing import Firer, FireSlices
from schedd.node._live import Live
from schedd.v1 import execution_pb2, worker_pb2


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


class _Dispatcher:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def submit(self, dispatches: list[worker_pb2.Dispatch]) -> None:
        self.sent.extend(d.execution_id for d in dispatches)


def _runner(partition: int, lives: list[Live]) -> Any:
    return SimpleNamespace(partition=partition, live={lv.ex.id: lv for lv in lives}, jobs={})


def _live(eid: str) -> Live:
    ex = execution_pb2.Execution(id=eid, job_id=eid.split("/", maxsplit=1)[0], fencing_token=7)
    return Live(ex=ex, message=worker_pb2.Dispatch(execution_id=eid, fencing_token=7))


async def test_a_waiting_partition_drops_what_left_its_runner_meanwhile() -> None:
    cfg = NodeConfig(node_id="t", data_dir=Path("/nonexistent"), fire_slice=2)
    m = Firer(cfg, ManualClock(0), history=None)  # type: ignore[arg-type]
    d = _Dispatcher()
    m.dispatcher = d  # type: ignore[assignment]
    first = [_live("a/1"), _live("b/1")]
    second = [_live("c/1"), _live("d/1"), _live("e/1")]
    r1, r2 = _runner(1, first), _runner(2, second)

    t1 = asyncio.ensure_future(m.fire(r1, first))
    t2 = asyncio.ensure_future(m.fire(r2, second))
    await asyncio.sleep(0)  # pass 1: r1 fires its two, r2 waits
    assert d.sent == ["a/1", "b/1"]
    del r2.live["d/1"]  # cancelled (or its job deleted) while r2 waited
    second[2].dispatched = True  # dispatched by another path meanwhile
    await asyncio.gather(t1, t2)
    assert d.sent == ["a/1", "b/1", "c/1"]
    assert m.running.by_job == {"a": "a/1", "b": "b/1", "c": "c/1"}


async def test_one_partition_beyond_the_slice_fires_a_slice_per_pass() -> None:
    cfg = NodeConfig(node_id="t", data_dir=Path("/nonexistent"), fire_slice=2)
    m = Firer(cfg, ManualClock(0), history=None)  # type: ignore[arg-type]
    d = _Dispatcher()
    m.dispatcher = d  # type: ignore[assignment]
    lives = [_live(f"j{i}/1") for i in range(5)]
    r = _runner(1, lives)
    task = asyncio.ensure_future(m.fire(r, lives))
    seen = []
    for _ in range(4):
        await asyncio.sleep(0)
        seen.append(len(d.sent))
    await task
    assert seen == [2, 4, 5, 5]  # one slice of two per pass
    assert d.sent == [f"j{i}/1" for i in range(5)]
