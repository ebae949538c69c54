"""Supervision for a process's background loops: a loop that fails is logged and restarted.

A background loop that dies silently (an unexpected exception ends its task, nobody awaits
it) leaves a node that looks alive and does nothing: the worst failure a scheduler can have.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from schedd._clock import Clock

log = logging.getLogger(__name__)


async def supervised(
    name: str,
    run: Callable[[], Awaitable[None]],
    *,
    clock: Clock,
    stopping: Callable[[], bool],
    restart_s: float = 1.0,
) -> None:
    """Runs ``run()`` until ``stopping()`` is true, restarting it when it fails or returns.

    A failure is logged with its traceback; a return while not stopping is logged too. Each
    restart waits ``restart_s`` (on ``clock``), so a loop that fails at once does not spin.
    Cancellation ends supervision.
    """
    while not stopping():
        try:
            await run()
        except asyncio.CancelledError:
            raise
        except Exception:
            if stopping():
                return
            log.exception("%s crashed; restarting it in %.1f s", name, restart_s)
        else:
            if stopping():
                return
            log.error("%s ended unexpectedly; restarting it in %.1f s", name, restart_s)
        await clock.sleep(restart_s)
