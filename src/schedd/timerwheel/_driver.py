"""Drive a TimerWheel from a Clock: sleep until the next non-empty bucket, fire in batches."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from schedd._clock import Clock, SystemClock
from schedd.timerwheel._handle import TimerHandle
from schedd.timerwheel._wheel import TimerWheel

T = TypeVar("T")


class WheelDriver(Generic[T]):
    """Runs a wheel in real (or manual) time and hands every due batch to ``on_expired``.

    ``run`` loops: advance the wheel to ``clock.now_ms()``, pass everything that expired to
    ``on_expired`` in one call (awaited if it returns an awaitable), then sleep until the
    wheel's ``next_expiry_ms()``, at most ``max_sleep_s`` (so a wall-clock step is noticed),
    or until ``add`` brings in an earlier timer, or ``stop`` is called.

    Use ``add`` and ``cancel`` from the event loop's thread (they are not thread-safe). An
    exception from ``on_expired`` ends ``run`` with that exception; its batch is not re-added.

    Args:
        wheel: the wheel to drive; the driver is its only caller of ``advance``.
        clock: the time source; a ManualClock makes the driver fully deterministic.
        on_expired: called with each non-empty batch, in expiry order.
        max_sleep_s: the longest single sleep.
    """

    def __init__(
        self,
        wheel: TimerWheel[T],
        clock: Clock,
        on_expired: Callable[[list[T]], Awaitable[None] | None],
        *,
        max_sleep_s: float = 1.0,
    ) -> None:
        self._wheel = wheel
        self._clock = clock
        self._on_expired = on_expired
        self._max_sleep_s = max_sleep_s
        self._stopping = False
        self._wake: asyncio.Future[None] | None = None
        self._sleep_until: int | None = None  # what the current sleep waits for

    @property
    def wheel(self) -> TimerWheel[T]:
        """The driven wheel (read-only use: ``len``, ``next_expiry_ms``)."""
        return self._wheel

    def add(self, expire_ms: int, item: T) -> TimerHandle:
        """Add a timer; wakes ``run`` if it is earlier than what ``run`` sleeps for."""
        handle = self._wheel.add(expire_ms, item)
        if self._wake is not None and (self._sleep_until is None or expire_ms < self._sleep_until):
            self._wake_up()
        return handle

    def cancel(self, handle: TimerHandle) -> bool:
        """Cancel a timer; False if it already fired or was cancelled."""
        return self._wheel.cancel(handle)

    def stop(self) -> None:
        """Make ``run`` return after the batch in progress, if any."""
        self._stopping = True
        self._wake_up()

    async def run(self) -> None:
        """Fire timers until ``stop``. Returns immediately if ``stop`` was already called."""
        while not self._stopping:
            if await self.step():
                continue  # time moved while the callback ran: look again before sleeping
            nxt = self._wheel.next_expiry_ms()
            if nxt is None:
                await self._sleep(None, self._max_sleep_s)
                continue
            delay_s = (nxt - self._clock.now_ms()) / 1000.0
            if delay_s > 0:
                await self._sleep(nxt, min(delay_s, self._max_sleep_s))
            else:
                await asyncio.sleep(0)  # let the loop breathe between back-to-back batches

    async def step(self) -> bool:
        """Advances the wheel to ``clock.now_ms()`` and hands what expired to ``on_expired``
        (one call), without sleeping; returns whether anything expired. What :meth:`run`
        does on each wake-up, for a caller that drives the wheel itself (a simulation on a
        manual clock); use one or the other."""
        batch = self._wheel.advance(self._clock.now_ms())
        if not batch:
            return False
        result = self._on_expired(batch)
        if inspect.isawaitable(result):
            await result
        return True

    async def _sleep(self, until_ms: int | None, seconds: float) -> None:
        """Sleep ``seconds`` on the clock, or until woken by ``add``/``stop``."""
        if self._stopping:
            return
        loop = asyncio.get_running_loop()
        wake: asyncio.Future[None] = loop.create_future()
        self._wake = wake
        self._sleep_until = until_ms
        if type(self._clock) is SystemClock:
            # The common case, up to a thousand times a second per partition: a loop timer
            # resolves the wake future, no sleeper task and no asyncio.wait.
            timer = loop.call_later(max(0.0, seconds), _resolve, wake)
            try:
                await wake
            finally:
                timer.cancel()
                self._wake = None
                self._sleep_until = None
            return
        sleeper = asyncio.ensure_future(self._clock.sleep(seconds))
        try:
            await asyncio.wait((sleeper, wake), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._wake = None
            self._sleep_until = None
            if not sleeper.done():
                sleeper.cancel()

    def _wake_up(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
