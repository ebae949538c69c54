"""FireTurns: one partition fires at a time, and what a fire woke runs before the next fire."""

from __future__ import annotations

import asyncio

from schedd.node._executions import FireTurns


async def test_turns_are_taken_in_order_and_woken_work_goes_between() -> None:
    turns = FireTurns()
    order: list[str] = []

    async def fire(name: str) -> None:
        async with turns:
            order.append(f"{name} fires")
            # what a fire wakes (a stream writer) is scheduled while the turn is held
            asyncio.get_running_loop().call_soon(order.append, f"{name}'s writer")

    await asyncio.gather(fire("a"), fire("b"), fire("c"))
    assert order == ["a fires", "a's writer", "b fires", "b's writer", "c fires", "c's writer"]


async def test_a_cancelled_waiter_does_not_keep_the_turn() -> None:
    turns = FireTurns()
    gate = asyncio.Event()
    done: list[str] = []

    async def holder() -> None:
        async with turns:
            await gate.wait()
            done.append("holder")

    async def waiter(name: str) -> None:
        async with turns:
            done.append(name)

    h = asyncio.create_task(holder())
    await asyncio.sleep(0)
    w1 = asyncio.create_task(waiter("w1"))
    w2 = asyncio.create_task(waiter("w2"))
    await asyncio.sleep(0)
    w1.cancel()  # cancelled while waiting
    gate.set()
    await asyncio.wait_for(asyncio.gather(h, w2, w1, return_exceptions=True), 5)
    assert done == ["holder", "w2"]
    async with turns:  # free again
        done.append("after")
    assert done[-1] == "after"


async def test_cancelled_right_after_being_handed_the_turn_passes_it_on() -> None:
    turns = FireTurns()
    done: list[str] = []

    async def waiter(name: str) -> None:
        async with turns:
            done.append(name)

    await turns.__aenter__()
    w1 = asyncio.create_task(waiter("w1"))
    w2 = asyncio.create_task(waiter("w2"))
    await asyncio.sleep(0)
    await turns.__aexit__()  # hands the turn to w1 on the next loop pass...
    w1.cancel()  # ...which is cancelled before it runs
    await asyncio.wait_for(asyncio.gather(w1, w2, return_exceptions=True), 5)
    assert done == ["w2"]
