"""Background work the dispatcher never loses silently: supervised loops, guarded calls.

A :class:`SupervisedLoop` runs a loop body as a task and, if the body fails, logs the
traceback and starts it again after a delay on the injected clock; :func:`guarded` awaits an
:class:`~schedd.dispatch.ExecutionAuthority` call so that its failure is logged, never raised
into a stream's reader; :func:`wait_until_done` bounds a wait on the same clock.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from schedd._clock import Clock

log = logging.getLogger(__name__)
_T = TypeVar("_T")


class SupervisedLoop:
    """One background loop that is restarted when it fails.

    Contract:
        * :meth:`start` runs ``body()`` as a task named ``name`` (once: a running loop is left
          alone).
        * If ``body()`` raises anything but cancellation, the exception is logged with its
          traceback, :attr:`restarts` counts it, and ``body()`` is called again after
          ``restart_delay_s`` on ``clock``. A body that returns is done, not restarted.
        * :meth:`stop` cancels the task and waits for it; the loop may be started again.
    """

    def __init__(
        self, name: str, body: Callable[[], Awaitable[None]], clock: Clock, restart_delay_s: float
    ) -> None:
        self.name = name
        #: How many times the body failed and was started again.
        self.restarts = 0
        self._body = body
        self._clock = clock
        self._restart_delay_s = restart_delay_s
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        if not self.running:
            self._task = asyncio.create_task(self._supervise(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _supervise(self) -> None:
        while True:
            try:
                await self._body()
                return
            except Exception:
                self.restarts += 1
                log.exception("%s failed; restarting it", self.name)
            await self._clock.sleep(self._restart_delay_s)


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
