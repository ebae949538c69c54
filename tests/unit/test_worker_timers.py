"""The worker's shared deadline queue, heartbeat ticker and thread-pool bridge."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from schedd.v1 import worker_pb2
from schedd.worker import Context
from schedd.worker._threads import ThreadBridge
from schedd.worker._timers import DeadlineQueue, HeartbeatTicker


@dataclass
class Item:
    name: str
    fired: list[str]
    done: bool = False

    def expire(self) -> None:
        self.fired.append(self.name)


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_deadlines_fire_in_order_and_skip_finished_items() -> None:
    loop = asyncio.get_running_loop()
    q = DeadlineQueue(loop)
    fired: list[str] = []
    past = loop.time() - 1.0
    late, early, finished = Item("late", fired), Item("early", fired), Item("finished", fired)
    q.add(past + 0.2, late)
    q.add(past + 0.1, early)
    q.add(past, finished)
    finished.done = True
    q.forget()
    q.add(loop.time() + 3600, Item("far", fired))
    await _turns()
    assert fired == ["early", "late"]
    assert len(q) == 1  # the far one still waits
    q.close()


async def test_an_earlier_deadline_rearms_the_timer() -> None:
    loop = asyncio.get_running_loop()
    q = DeadlineQueue(loop)
    fired: list[str] = []
    q.add(loop.time() + 3600, Item("far", fired))
    q.add(loop.time() - 1.0, Item("now", fired))
    await _turns()
    assert fired == ["now"]
    q.close()


async def test_finished_items_are_compacted_away() -> None:
    loop = asyncio.get_running_loop()
    q = DeadlineQueue(loop)
    fired: list[str] = []
    items = [Item(str(i), fired) for i in range(3000)]
    for it in items:
        q.add(loop.time() + 3600, it)
    for it in items[:2500]:
        it.done = True
        q.forget()
    assert len(q._heap) < 3000  # rebuilt once most entries were finished
    assert len(q) == 500
    q.close()


async def test_the_ticker_beats_what_runs_and_stops_when_nothing_does() -> None:
    loop = asyncio.get_running_loop()
    beats: list[str] = []
    four = asyncio.Event()
    idle = asyncio.Event()
    running: dict[str, Any] = {}

    def beat(name: str) -> None:
        beats.append(name)
        if len(beats) >= 4:
            four.set()

    def due() -> list[Any]:
        if not running:
            idle.set()
        return list(running.values())

    running.update(a=lambda: beat("a"), b=lambda: beat("b"))
    ticker = HeartbeatTicker(loop, due, lambda: 0.0)  # at the 0.05 s floor
    ticker.wake()
    ticker.wake()  # idempotent while it runs
    await asyncio.wait_for(four.wait(), 5)
    assert sorted(beats[:2]) == ["a", "b"] and sorted(beats[2:4]) == ["a", "b"]
    running.clear()
    await asyncio.wait_for(idle.wait(), 5)
    assert ticker._timer is None  # a tick that found nothing stopped it
    ticker.close()


def _ctx(eid: str) -> Context:
    return Context(worker_pb2.Dispatch(execution_id=eid), ledger=None)  # type: ignore[arg-type]


async def test_the_bridge_settles_results_errors_and_skips_cancelled_work() -> None:
    loop = asyncio.get_running_loop()
    ran: list[str] = []
    gate = threading.Event()

    def handler(ctx: Context, payload: Any) -> Any:
        if payload == "block":
            gate.wait(10)
        ran.append(ctx.execution_id)
        if payload == "fail":
            raise ValueError("nope")
        if payload == "stop":
            raise StopIteration
        return payload

    @dataclass
    class Calls:
        futures: dict[str, asyncio.Future[Any]] = field(default_factory=dict)

    with ThreadPoolExecutor(1) as pool:
        bridge = ThreadBridge(loop, pool)
        calls = Calls()
        for eid, payload in [("blocker", "block"), ("ok", 7), ("fail", "fail"), ("stop", "stop")]:
            calls.futures[eid] = bridge.submit(handler, _ctx(eid), payload)
        skipped_ctx = _ctx("skipped")
        skipped = bridge.submit(handler, skipped_ctx, 1)
        skipped_ctx.cancel("cancelled while queued")
        gate.set()
        assert await calls.futures["ok"] == 7
        with pytest.raises(ValueError, match="nope"):
            await calls.futures["fail"]
        with pytest.raises(RuntimeError, match="StopIteration"):
            await calls.futures["stop"]
        with pytest.raises(asyncio.CancelledError):
            await skipped
    assert ran == ["blocker", "ok", "fail", "stop"]  # the cancelled one never ran


async def test_many_completions_share_few_wakeups() -> None:
    loop = asyncio.get_running_loop()
    wakeups = 0
    with ThreadPoolExecutor(4) as pool:
        bridge = ThreadBridge(loop, pool)
        settle = bridge._settle

        def counting_settle() -> None:
            nonlocal wakeups
            wakeups += 1
            settle()

        bridge._settle = counting_settle  # type: ignore[method-assign]
        futures = [bridge.submit(lambda c, p: p, _ctx(str(i)), i) for i in range(2000)]
        assert await asyncio.gather(*futures) == list(range(2000))
    assert wakeups < 2000
