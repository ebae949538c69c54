"""Time as a parameter: every component that needs "now" takes a :class:`Clock`."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    """A source of wall time in UTC milliseconds and a way to wait for it."""

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for timeouts and intervals)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait this long (a manual clock waits until advanced past it)."""
        ...


class SystemClock:
    """The real clock."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock that moves only when told: for tests that must never sleep.

    >>> c = ManualClock(1_000)
    >>> c.advance(0.5); c.now_ms()
    1500
    """

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = float(start_ms)
        self._waiters: list[tuple[float, asyncio.Future[None]]] = []

    def now_ms(self) -> int:
        return int(self._now_ms)

    def monotonic(self) -> float:
        return self._now_ms / 1000.0

    def set_ms(self, now_ms: int) -> None:
        if now_ms < self._now_ms:
            raise ValueError("a ManualClock never goes back")
        self._now_ms = float(now_ms)
        self._wake()

    def advance(self, seconds: float) -> None:
        self._now_ms += seconds * 1000.0
        self._wake()

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((self._now_ms + seconds * 1000.0, fut))
        await fut

    def _wake(self) -> None:
        keep: list[tuple[float, asyncio.Future[None]]] = []
        for deadline, fut in self._waiters:
            if deadline <= self._now_ms:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((deadline, fut))
        self._waiters = keep
