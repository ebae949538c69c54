"""Telling the execution authority what was lost, and finishing those reports on stop."""

from __future__ import annotations

import asyncio
import logging

from schedd._clock import Clock
from schedd.dispatch._config import DispatchStats, ExecutionAuthority, InFlight
from schedd.dispatch._supervision import guarded, wait_until_done

log = logging.getLogger(__name__)


class LossReports:
    """Reports lost executions to :meth:`ExecutionAuthority.on_lost`, counted in ``stats.lost``.

    A report is awaited (:meth:`report`, the reaper's) or runs as a task of its own
    (:meth:`report_soon`, a stream's end, which must not wait for the authority); the tasks
    are kept until they finish, so :meth:`finish` can wait for them or cancel them.
    """

    def __init__(self, authority: ExecutionAuthority, stats: DispatchStats, clock: Clock) -> None:
        self._authority = authority
        self._stats = stats
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()

    async def report(self, lost: list[InFlight], reason: str) -> None:
        self._stats.lost += len(lost)
        log.warning("%d executions lost: %s", len(lost), reason)
        await guarded(self._authority.on_lost(lost, reason), "on_lost")

    def report_soon(self, lost: list[InFlight], reason: str) -> None:
        task = asyncio.create_task(self.report(lost, reason))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def finish(self, wait_s: float) -> None:
        """Let the reports under way finish for up to ``wait_s`` on the clock (0: none), then
        cancel what is left."""
        reports = list(self._tasks)
        if not reports:
            return
        if wait_s > 0:
            everything = asyncio.gather(*reports, return_exceptions=True)
            if await wait_until_done(self._clock, everything, wait_s):
                return
        for t in reports:
            t.cancel()
        await asyncio.gather(*reports, return_exceptions=True)
