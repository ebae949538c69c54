"""One owned partition: its window of due entries, claims ahead of the fire, its timer wheel.

The life of a schedule fire here::

    due/p/{due_ms}/{job} in the store --load (window W)--> window (sorted, in memory)
        --claim at due_ms - L (batched, fenced txn)--> runs/p/{job}/{sched} PENDING, token = rev
        --wheel timer at due_ms--> FirePolicy decides --> Dispatch through the outbound port
        --Result with the token--> settle policy decides --> one fenced write per batch

The partition is the only writer of its state (:class:`~._part_core.PartitionCore`): its
parts are the claims (:mod:`._part_claims`), the fires (:mod:`._part_fires`) and the results
(:mod:`._part_results`); the policies they consult decide and write nothing. Everything that
matters is in the store; this object is rebuilt from it on start or takeover, and every
execution it inherits is re-tokened before it is dispatched again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from schedd._errors import SchedError
from schedd.node._live import claims_to_give_back
from schedd.node._part_claims import Claiming, to_adopt
from schedd.node._part_fires import Firing
from schedd.node._part_results import Settling
from schedd.store import FIRE

log = logging.getLogger(__name__)


class Partition(Claiming, Firing, Settling):
    """Schedules the jobs of one partition while this node holds its fence (built with the
    arguments of :class:`~._part_core.PartitionCore`)."""

    async def start(self) -> None:
        """Loads the window and the live executions, re-tokens inherited ones, starts loops."""
        await self.load()
        self._tasks = [
            asyncio.create_task(self._claim_loop(), name=f"claim-{self.partition}"),
            asyncio.create_task(self.driver.run(), name=f"wheel-{self.partition}"),
        ]
        for task in self._tasks:
            task.add_done_callback(self._task_ended)

    async def load(self) -> None:
        """Loads the window and the live executions and re-tokens inherited ones, without
        starting the loops: :meth:`start` does both; a caller that drives the partition step
        by step (``schedd.testing``, on virtual time) calls :meth:`step` and the wheel
        driver's ``step`` itself instead of the loops."""
        now = self.clock.now_ms()
        # Set first: creations notified while the load is in flight are kept, not dropped.
        self.window.end = now + self.config.window_ms
        entries, _ = await self.store.load_due(self.window.end)
        self.window.extend(entries, self.window.end)
        waiting = {(e.job_id, e.scheduled_ms) for e in entries if e.kind != FIRE}
        runs = await self.store.load_runs()
        end = self.window.end
        inherited = [r for r in runs if to_adopt(r, (r.job_id, r.scheduled_ms) in waiting, end)]
        await self.adopt(inherited)
        log.info(
            "partition %d: loaded %d due entries, adopted %d live executions (epoch %d)",
            self.partition, len(entries), len(inherited), self.store.fence.epoch,
            extra=self.log_fields,
        )  # fmt: skip

    async def stop(self, graceful: bool = False, timeout: float | None = None) -> list[str]:
        """Stops the loops; returns the ids of executions this partition had in memory
        (they stop counting as running here).

        Graceful (the partition is handed over on purpose: rebalance, shutdown, clock skew):
        first gives back claimed fires not yet dispatched (:meth:`unclaim`, bounded by
        ``timeout``), so the next owner applies their misfire policy. Not graceful (the fence
        is lost, or a loop crashed): the next owner adopts what the store holds.
        """
        if graceful:
            try:
                given_back = await asyncio.wait_for(self.unclaim(), timeout)
                if given_back:
                    log.info(
                        "partition %d: gave back %d claimed fires", self.partition, given_back,
                        extra=self.log_fields,
                    )  # fmt: skip
            except TimeoutError:
                log.warning(
                    "partition %d: giving back claimed fires timed out", self.partition,
                    extra=self.log_fields,
                )  # fmt: skip
        self._stopping = True
        self.driver.stop()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self.stopped.set()
        ids = list(self.live)
        for live in list(self.live.values()):
            self.running.discard(live.ex.job_id, live.ex.id)
        return ids

    async def unclaim(self) -> int:
        """Gives back claimed schedule fires not yet dispatched (graceful release).

        The next owner then sees them as due entries and applies each job's misfire policy,
        instead of inheriting claims it must honour. Returns how many were given back.
        Only a job's latest claims go back (those after every fire of it that stays claimed:
        dispatched, or not a plain schedule fire): the job's cursor moves back to the first
        one given back, and a fire after it that still has its run could never be claimed
        again, nor created twice, so the next owner would spin on it.
        The wheel stops first: a fire dispatched while its give-back is in flight would run
        here and again at the next owner. Only :meth:`stop` may follow (``stop(graceful=True)``
        calls it).
        """
        self._stopping = True
        self.driver.stop()
        async with self.lock:
            by_job = claims_to_give_back(self.live.values())
            items, groups = [], []
            for job_id, lives in by_job.items():
                cached = self.jobs.get(job_id)
                if cached is None:
                    continue
                items.append(self.store.unclaim(cached, [lv.ex for lv in lives]))
                groups.append(lives)
                for lv in lives:  # out of reach of a fire already in progress
                    self.drop(lv)
            if not items:
                return 0
            try:
                ok = (await self.store.apply(items)).ok
            except SchedError as exc:  # FencedOut too
                ok = [False] * len(items)
                log.warning(
                    "partition %d: could not give back claimed fires (%s); the next owner "
                    "adopts what the store holds", self.partition, exc, extra=self.log_fields,
                )  # fmt: skip
            n = 0
            for lives, good in zip(groups, ok, strict=True):
                if good:
                    n += len(lives)
                    log.debug("gave back %s", ", ".join(lv.ex.id for lv in lives))
                else:
                    self.live.update((lv.ex.id, lv) for lv in lives)
            return n

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        """Supervision: a loop of this partition that ends while the partition runs is a crash.

        A partition whose claim loop or wheel has stopped fires nothing while it stays owned,
        the worst failure a scheduler can have; so the node is told to release it (a peer, or
        this node with a fresh partition, takes it over from what the store holds).
        """
        if self._stopping or task.cancelled():
            return
        self._stopping = True
        exc = task.exception()
        log.error(
            "partition %d: %s %s; releasing the partition", self.partition, task.get_name(),
            "crashed" if exc else "ended", exc_info=exc, extra=self.log_fields,
        )  # fmt: skip
        self.events.partition_failed(self.partition, f"{task.get_name()} crashed: {exc!r}")
