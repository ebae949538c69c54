"""WheelDriver on a ManualClock (once on the real clock): batches, earlier adds wake it, stop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from schedd._clock import ManualClock, SystemClock
from schedd.timerwheel import TimerWheel, WheelDriver


async def spin(rounds: int = 20) -> None:
    """Let the driver task run a few loop iterations (no real time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)


class Harness:
    def __init__(self, start_ms: int = 0) -> None:
        self.clock = ManualClock(start_ms)
        self.batches: list[list[str]] = []
        self.driver: WheelDriver[str] = WheelDriver(
            TimerWheel(tick_ms=10, wheel_size=512, start_ms=start_ms),
            self.clock,
            self.batches.append,
        )


@pytest.fixture
async def h() -> AsyncIterator[Harness]:
    harness = Harness()
    task = asyncio.create_task(harness.driver.run())
    await spin()
    yield harness
    harness.driver.stop()
    await asyncio.wait_for(task, 1)


async def test_hands_out_a_bucket_in_one_batch(h: Harness) -> None:
    h.driver.add(100, "a")
    h.driver.add(105, "b")
    h.driver.add(300, "c")
    await spin()
    h.clock.set_ms(99)
    await spin()
    assert h.batches == []
    h.clock.set_ms(109)
    await spin()
    assert h.batches == [["a", "b"]]
    h.clock.set_ms(2_000)  # one jump: everything left comes out together
    await spin()
    assert h.batches == [["a", "b"], ["c"]]
    assert len(h.driver.wheel) == 0


async def test_earlier_add_wakes_the_sleeping_driver(h: Harness) -> None:
    h.driver.add(900, "late")
    await spin()  # now sleeping until 909
    h.driver.add(50, "early")
    await spin()
    h.clock.set_ms(59)
    await spin()
    assert h.batches == [["early"]]
    h.clock.set_ms(909)
    await spin()
    assert h.batches == [["early"], ["late"]]


async def test_add_to_idle_driver_and_past_timer(h: Harness) -> None:
    h.clock.set_ms(500)
    await spin()
    h.driver.add(400, "overdue")  # idle driver: woken, fires without the clock moving
    await spin()
    assert h.batches == [["overdue"]]


async def test_cancel_through_driver(h: Harness) -> None:
    handle = h.driver.add(100, "x")
    h.driver.add(100, "y")
    assert h.driver.cancel(handle)
    h.clock.set_ms(200)
    await spin()
    assert h.batches == [["y"]]
    assert not h.driver.cancel(handle)


async def test_far_timer_cascades_while_driven(h: Harness) -> None:
    far = 3 * 5_120 * 512 + 77  # beyond the first overflow wheel
    h.driver.add(far, "far")
    t = 0
    while not h.batches:
        nxt = h.driver.wheel.next_expiry_ms()
        assert nxt is not None
        t = max(t + 1, nxt)
        h.clock.set_ms(t)
        await spin()
    assert h.batches == [["far"]]
    assert far <= t < far + 10


async def test_async_callback_is_awaited_and_stop_returns() -> None:
    clock = ManualClock(0)
    seen: list[list[int]] = []
    gate = asyncio.Event()

    async def on_expired(batch: list[int]) -> None:
        await gate.wait()
        seen.append(batch)

    driver: WheelDriver[int] = WheelDriver(TimerWheel(start_ms=0), clock, on_expired)
    task = asyncio.create_task(driver.run())
    driver.add(10, 1)
    clock.set_ms(50)
    await spin()
    driver.add(20, 2)  # arrives while the callback is blocked
    assert seen == []
    gate.set()
    await spin()
    assert seen == [[1], [2]]
    driver.stop()
    await asyncio.wait_for(task, 1)
    assert task.done()


async def test_callback_error_ends_run() -> None:
    clock = ManualClock(0)

    def boom(batch: list[str]) -> None:
        raise RuntimeError("handler failed")

    driver: WheelDriver[str] = WheelDriver(TimerWheel(start_ms=0), clock, boom)
    driver.add(0, "x")
    with pytest.raises(RuntimeError, match="handler failed"):
        await asyncio.wait_for(driver.run(), 1)


async def test_stop_before_run_returns_immediately() -> None:
    driver: WheelDriver[str] = WheelDriver(TimerWheel(start_ms=0), ManualClock(0), print)
    driver.stop()
    await asyncio.wait_for(driver.run(), 1)


async def test_system_clock_driver_sleeps_on_a_loop_timer_and_wakes_for_earlier_adds() -> None:
    """The real clock takes the timer-future path: fires at or after expiry, in order, and an
    earlier add cuts a long sleep short (bounded by wait_for, not by asserted timings)."""
    clock = SystemClock()
    fired: list[tuple[str, int]] = []
    done = asyncio.Event()

    def on_expired(batch: list[str]) -> None:
        fired.extend((item, clock.now_ms()) for item in batch)
        if len(fired) == 2:
            done.set()

    now = clock.now_ms()
    driver: WheelDriver[str] = WheelDriver(
        TimerWheel(tick_ms=1, start_ms=now), clock, on_expired, max_sleep_s=30.0
    )
    task = asyncio.create_task(driver.run())
    late = driver.add(now + 20_000, "late")  # the driver now sleeps up to 20 s
    await spin()
    early_at = clock.now_ms() + 30
    driver.add(early_at, "early")
    driver.add(early_at + 10, "second")
    driver.cancel(late)
    await asyncio.wait_for(done.wait(), 5)
    assert [item for item, _ in fired] == ["early", "second"]
    assert fired[0][1] >= early_at and fired[1][1] >= early_at + 10
    driver.stop()
    await asyncio.wait_for(task, 1)
