"""A wait bounded on the injected clock, for the coordination parts' ``stop(timeout=...)``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from schedd._clock import Clock


async def within(clock: Clock, aw: Awaitable[Any], timeout: float | None) -> bool:
    """Await ``aw`` for at most ``timeout`` seconds on ``clock`` (None: as long as it takes).

    Returns:
        Whether it finished in time; if not, it was cancelled. Its exception is raised.
    """
    if timeout is None:
        await aw
        return True
    work = asyncio.ensure_future(aw)
    sleeper = asyncio.ensure_future(clock.sleep(max(0.0, timeout)))
    try:
        await asyncio.wait((work, sleeper), return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
        finished = work.done()
        if not finished:
            work.cancel()
    if finished:
        work.result()
    return finished
