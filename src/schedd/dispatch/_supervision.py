"""Calls the dispatcher never lets fail into a stream's reader, and bounded waits.

:func:`guarded` awaits an :class:`~schedd.dispatch.ExecutionAuthority` call so that its
failure is logged, never raised into a stream's reader; :func:`wait_until_done` bounds a wait
on the injected clock. The dispatcher's loops are supervised by
:class:`schedd._supervise.SupervisedLoop`, as the node's are.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any, TypeVar

from schedd._clock import Clock

log = logging.getLogger(__name__)
_T = TypeVar("_T")


async def guarded(aw: Awaitable[_T], what: str) -> _T | None:
    """Await an execution authority call; if it fails, log it (``what`` names it) and give None."""
    try:
        return await aw
    except Exception:
        log.exception("execution authority %s failed", what)
        return None


async def wait_until_done(clock: Clock, fut: asyncio.Future[Any], seconds: float) -> bool:
    """Wait until ``fut`` is done or ``seconds`` have passed on ``clock``; ``fut`` is not
    cancelled either way.

    Returns:
        Whether ``fut`` is done.
    """
    if fut.done():
        return True
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait((fut, sleeper), return_when=asyncio.FIRST_COMPLETED)
    finally:
        sleeper.cancel()
    return fut.done()
