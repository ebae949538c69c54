"""A partition's part in jobs that run after others (see ``store/_arrivals.py``).

As a parent's owner: every write that ends an execution of a job with children carries the
arrivals at them (:meth:`Depending.told`). As a child's owner: what arrived for this
partition's jobs is read (told by the node's arrival watch, at load, and every
:data:`RESCAN_MS` in case a watch event was lost) and each (child, fire) is started once
every parent succeeded, or skipped once one did not.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from schedd.model import new_execution, state_name
from schedd.node._part_core import PartitionCore
from schedd.store import ARRIVED_OK, ARRIVED_SKIP, Arrivals, DueEntry, Item, Waiting
from schedd.store.abc import Op
from schedd.v1 import execution_pb2

log = logging.getLogger(__name__)

#: How often a partition reads all its arrivals anyway (a lost watch event costs this much).
RESCAN_MS = 10_000
#: How long a skipped child's arrivals are kept for a redrive of its parent to carry on.
SKIPPED_KEPT_MS = 7 * 86_400_000


class Depending(PartitionCore):
    """Hands a parent's outcome to its children and starts or skips them."""

    _deps: Arrivals | None = None
    _arrived: set[tuple[str, int]]
    _rescan_at: int = 0

    @property
    def deps(self) -> Arrivals:
        if self._deps is None:
            store = self.store
            self._deps = Arrivals(
                store.kv, store.keys, self.partition, self.config.partitions,
                store.sealer.execution_value,
            )  # fmt: skip
            self._arrived = set()
        return self._deps

    # -- as the parent's owner ------------------------------------------------------------------

    def tell_children(self, job_id: str, fire_ms: int, state: int, why: str) -> list[Op]:
        cached = self.jobs.get(job_id)
        if cached is None or not cached.job.children:  # the common case: checked first
            return []
        if state == execution_pb2.EXECUTION_SUCCEEDED:
            outcome = ARRIVED_OK
        else:
            ended = f"{job_id} ended {state_name(state)}: {why or 'no reason given'}"
            outcome = ARRIVED_SKIP + ended.encode()
        return self.deps.tell(cached.job, fire_ms, outcome)

    # -- as the child's owner -------------------------------------------------------------------

    def arrived(self, child: str, fire_ms: int) -> None:
        """Something arrived for ``child``'s execution of ``fire_ms`` (the watch saw it)."""
        _ = self.deps
        self._arrived.add((child, fire_ms))
        self._wake.set()

    async def settle_arrivals(self) -> None:
        """Starts or skips what arrived (a read of all arrivals every RESCAN_MS)."""
        now = self.clock.now_ms()
        deps = self.deps
        if now >= self._rescan_at:
            self._rescan_at = now + RESCAN_MS
            self._arrived.clear()
            waiting = await deps.read()
        elif self._arrived:
            children = {c for c, _ in self._arrived}
            self._arrived.clear()
            waiting = {}
            for child in sorted(children):
                waiting.update(await deps.read(child))
        else:
            return
        if waiting:
            async with self.lock:
                await self._decide(waiting.values(), now)

    async def _decide(self, waiting: Iterable[Waiting], now: int) -> None:
        waiting = list(waiting)
        missing = [w.child for w in waiting if w.child not in self.jobs]
        if missing:
            self.jobs.update(await self.store.fetch_jobs(missing))
        for w in waiting:
            cached = self.jobs.get(w.child)
            if cached is None or (w.skipped is not None and now - w.fire_ms > SKIPPED_KEPT_MS):
                # The child is gone, or its skip is too old for a redrive to carry on.
                await self._write_one(self.deps.drop(w), w, "dropped arrivals")
                continue
            job = cached.job
            reason = w.skip_reason()
            if reason is None and job.paused and w.ready(job.after):
                reason = f"{job.id} is paused"
            if reason is None and w.ready(job.after):
                ex = new_execution(
                    job, self.partition, w.fire_ms, now, execution_pb2.TRIGGER_DEPENDENCY
                )
                rev = await self._write_one(
                    self.deps.start(w, cached.spec_revision, ex), w, "a dependent's start"
                )
                if rev:
                    entry = DueEntry(self.partition, now, w.child, "r", w.fire_ms, rev)
                    self.add_due(entry)
            elif reason is not None and w.skipped is None:
                self._record_skipped(job.id, w, reason, now)
                await self._write_one(self.deps.skip(w, reason, job), w, "a dependent's skip")

    def _record_skipped(self, job_id: str, w: Waiting, reason: str, now: int) -> None:
        cached = self.jobs[job_id]
        ex = new_execution(
            cached.job, self.partition, w.fire_ms, now, execution_pb2.TRIGGER_DEPENDENCY
        )
        ex.state = execution_pb2.EXECUTION_SKIPPED
        ex.reason = reason
        ex.finished_ms = now
        self.history.record([ex])  # before the write: recording it again is harmless
        log.info("%s: skipped: %s", ex.id, reason, extra=self.run_fields(ex))

    async def _write_one(self, item: Item, w: Waiting, what: str) -> int:
        written = await self.write([item], [(w.child, "")], what)
        return written.revisions[0] if written is not None else 0
