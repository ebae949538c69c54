"""A node fences itself before its lease can have expired: the session stops acting a margin
before the TTL, and while it may not act, nothing is fired or handed out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from unit.partition_kit import Outbox, config, live, own

from schedd._clock import ManualClock
from schedd._errors import Unavailable
from schedd.coord import Session
from schedd.dispatch import Dispatcher
from schedd.node._fire_policy import FirePolicy
from schedd.store import MemoryKV
from schedd.v1 import worker_pb2


async def _run_for(clock: ManualClock, seconds: float, step: float = 0.05) -> None:
    for _ in range(round(seconds / step)):
        clock.advance(step)
        for _ in range(5):
            await asyncio.sleep(0)


async def _session(keepalive: Any = None) -> tuple[Session, ManualClock]:
    clock = ManualClock(1_000_000)
    kv = MemoryKV(clock=clock)
    if keepalive is not None:
        kv.keepalive_once = keepalive  # type: ignore[method-assign]
    session = Session(kv, ttl_s=4, clock=clock)  # margin: 1 s
    await session.start()
    return session, clock


@pytest.mark.parametrize("failure", ["hangs", "fails"])
async def test_without_keep_alives_it_stops_acting_a_margin_before_the_ttl(failure: str) -> None:
    async def hang(lease_id: int) -> int:
        await asyncio.Event().wait()
        return 0

    async def fail(lease_id: int) -> int:
        raise Unavailable("injected: etcd unreachable")

    session, clock = await _session(hang if failure == "hangs" else fail)
    assert session.margin_s == 1.0
    await _run_for(clock, 2.9)
    assert session.may_act() and not session.done.is_set()
    await _run_for(clock, 0.15)  # 3.05 s: past TTL - margin, still before the lease expires
    assert not session.may_act()
    assert session.done.is_set()
    await session.stop()


async def test_keep_alives_keep_it_acting_past_the_ttl() -> None:
    session, clock = await _session()
    await _run_for(clock, 12.0)
    assert session.may_act() and not session.done.is_set()
    await session.stop()
    assert not session.may_act()


async def test_a_process_resumed_after_a_pause_finds_itself_fenced() -> None:
    session, clock = await _session()
    clock.advance(3.5)  # a SIGSTOP: no loop pass in between
    assert not session.may_act(), "checked before any keep-alive could run"
    for _ in range(5):
        await asyncio.sleep(0)
    assert session.done.is_set()
    await session.stop()


async def test_a_fenced_node_fires_nothing_and_retries_shortly() -> None:
    clock = ManualClock(5_000)
    acting = False
    cfg = config()
    policy = FirePolicy(cfg, clock, may_act=lambda: acting)
    out = Outbox()
    part = await own(MemoryKV(clock=clock), clock, None, cfg, policy=policy, outbound=out)
    lv = live(part, "j@5000", due_ms=5_000, token=3)
    await part.fire([lv])
    assert out.sent == [] and not lv.dispatched
    assert part.wheel.next_expiry_ms() == 5_100  # re-armed shortly after
    acting = True
    await part.fire([lv])
    assert out.sent == ["j@5000"] and lv.dispatched


def test_a_fenced_dispatcher_holds_nothing() -> None:
    d = Dispatcher("n", authority=None)  # type: ignore[arg-type]
    d.may_dispatch = lambda: False
    ds = [worker_pb2.Dispatch(execution_id="j@1", start_at_ms=10)]
    assert d.hold(ds) == ds


async def test_the_promise_to_holding_workers_ends_before_the_lease_and_after_acting() -> None:
    async def hang(lease_id: int) -> int:
        await asyncio.Event().wait()
        return 0

    session, clock = await _session(hang)  # TTL 4 s, margin 1 s
    assert session.held_for_s() == 3.5  # the lease's end less half the margin
    await _run_for(clock, 2.0)
    assert session.may_act() and session.held_for_s() == 1.5
    await _run_for(clock, 1.05)
    assert session.held_for_s() == 0.0, "no promise once the session may not act"
    await session.stop()
