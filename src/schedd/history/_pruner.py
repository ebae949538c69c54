"""Pruning the run history on a timer, not only when the node starts.

A node that runs for weeks would otherwise keep every execution it finished since its start;
the retention (``history_ttl_ms``) is a promise about disk use, so it is kept continuously.
"""

from __future__ import annotations

import asyncio
import logging

from schedd._clock import Clock
from schedd.history._rocks import History

log = logging.getLogger(__name__)

#: Most executions deleted between two yields to the event loop (a large backlog is pruned
#: in slices, so API calls and dispatches are not held up behind one long RocksDB pass).
PRUNE_SLICE = 5000


class HistoryPruner:
    """Prunes ``history`` every ``interval_s`` seconds of ``clock``.

    Args:
        history: the node's history.
        clock: the node's clock (a ManualClock in tests).
        interval_s: time between two prunes; must be positive.
    """

    def __init__(self, history: History, clock: Clock, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.history = history
        self.clock = clock
        self.interval_s = interval_s
        #: Executions deleted since start, for logs and tests.
        self.pruned = 0

    async def prune_now(self) -> int:
        """Deletes everything older than the retention, a slice at a time; returns how many."""
        total = 0
        while True:
            n = self.history.prune(self.clock.now_ms(), limit=PRUNE_SLICE)
            total += n
            if n < PRUNE_SLICE:
                break
            await asyncio.sleep(0)
        self.pruned += total
        if total:
            log.info("history: pruned %d executions older than %d ms", total, self.history.ttl_ms)
        return total

    async def run(self) -> None:
        """Prunes every ``interval_s`` until cancelled (the first prune after one interval:
        the node prunes once at start)."""
        while True:
            await self.clock.sleep(self.interval_s)
            await self.prune_now()
