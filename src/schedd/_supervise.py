"""Supervision for a process's background loops: a loop that fails is logged and restarted.

A background loop that dies silently (an unexpected exception ends its task, nobody awaits
it) leaves a node that looks alive and does nothing: the worst failure a scheduler can have.
So a loop that raises, and a loop that returns while nobody stopped it, are both logged and
started again. One supervisor for the node's loops and the dispatcher's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from schedd._clock import Clock

log = logging.getLogger(__name__)


class SupervisedLoop:
    """One background loop that is restarted when it fails or ends unasked.

    Contract:
        * :meth:`start` runs the supervision as a task named ``name`` (once: a running loop
          is left alone); or a caller that owns the task awaits :meth:`run` itself.
        * If ``body()`` raises anything but cancellation, the exception is logged with its
          traceback; if it returns, that is logged as an error. Either way :attr:`restarts`
          counts it and ``body()`` is called again after ``restart_s`` on ``clock``, so a
          body that fails at once does not spin.
        * Once stopping (:meth:`stop` was called, or ``stopping()`` says so), a body that
          fails or returns ends supervision quietly: shutdown is not a crash.
        * :meth:`stop` cancels the task and waits for it; the loop may be started again.
          Cancelling :meth:`run` ends supervision too.
    """

    def __init__(
        self,
        name: str,
        body: Callable[[], Awaitable[None]],
        clock: Clock,
        restart_s: float = 1.0,
        *,
        stopping: Callable[[], bool] | None = None,
    ) -> None:
        self.name = name
        #: How many times the body failed or ended and was started again.
        self.restarts = 0
        self._body = body
        self._clock = clock
        self._restart_s = restart_s
        self._stopping = stopping
        self._stopped = False
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def _is_stopping(self) -> bool:
        return self._stopped or (self._stopping is not None and self._stopping())

    def start(self) -> None:
        if not self.running:
            self._stopped = False
            self._task = asyncio.create_task(self.run(), name=self.name)

    async def stop(self) -> None:
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def run(self) -> None:
        """Supervise ``body()`` in the calling task until stopping (or cancelled)."""
        while not self._is_stopping():
            try:
                await self._body()
            except asyncio.CancelledError:
                raise
            except Exception:
                if self._is_stopping():
                    return
                log.exception("%s crashed; restarting it in %.1f s", self.name, self._restart_s)
            else:
                if self._is_stopping():
                    return
                log.error(
                    "%s ended unexpectedly; restarting it in %.1f s", self.name, self._restart_s
                )
            self.restarts += 1
            await self._clock.sleep(self._restart_s)


async def supervised(
    name: str,
    run: Callable[[], Awaitable[None]],
    *,
    clock: Clock,
    stopping: Callable[[], bool],
    restart_s: float = 1.0,
) -> None:
    """Runs ``run()`` under a :class:`SupervisedLoop` in the calling task, until
    ``stopping()`` is true (or the task is cancelled)."""
    await SupervisedLoop(name, run, clock, restart_s, stopping=stopping).run()
