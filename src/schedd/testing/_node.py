"""One life of the harness's scheduler node: the real roles, driven step by step.

A :class:`SimNode` is what ``schedd node`` runs for its partitions, minus the processes and
the network: per partition the real :class:`~schedd.node._partition.Partition` (window, claim
planner, misfire policies, timer wheel; results, retries with backoff and full jitter, dead
letters) under its own fence; the real :class:`~schedd.node._fire_policy.FirePolicy`
(overlap policies) and :class:`~schedd.node._settling.ResultRouter`; the real
:class:`~schedd.node._notify.NotifyWatcher` routing the client API's notices. Instead of
their loops (which wait on the event loop's real clock) the harness calls :meth:`step` at
each instant of virtual time it visits, and :meth:`next_event_ms` says which instant comes
next.
"""

from __future__ import annotations

import random
from pathlib import Path

from schedd._clock import ManualClock
from schedd.node import (
    FirePolicy,
    NodeConfig,
    NotifyWatcher,
    OwnedPartitions,
    Partition,
    ResultRouter,
)
from schedd.store import Fence, Keys, MemoryKV, PartitionStore, prefix_end
from schedd.testing._runs import RunLog
from schedd.testing._workers import WORKER_ID, WorkerPool

#: Compact the store's history after this many revisions (a year of fires would otherwise
#: keep every version of every key in memory).
_COMPACT_EVERY = 20_000


class _Events:
    """What a partition tells its node (a fence lost, a loop crashed): in the harness both
    are bugs or misuse, so they are kept and raised by the next step."""

    def __init__(self) -> None:
        self.problem = ""

    def partition_lost(self, partition: int, reason: str) -> None:
        self.problem = f"partition {partition} lost: {reason}"

    def partition_failed(self, partition: int, reason: str) -> None:
        self.problem = f"partition {partition} failed: {reason}"


def harness_config(partitions: int) -> NodeConfig:
    """The node's settings in the harness: the defaults of ``schedd node``, except that no
    execution is sent to a worker ahead of its instant (``hold_ms=0``; the harness's workers
    start everything at once, so holding would change nothing but the bookkeeping), and a
    window of 10 s instead of 60 (what is in memory ahead of the claims: the claim pacer scans
    it on every round, and the harness skips the extensions that would read nothing)."""
    return NodeConfig(
        node_id="harness",
        partitions=partitions,
        data_dir=Path("/nonexistent"),
        hold_ms=0,
        window_ms=10_000,
    )


class SimNode:
    """One incarnation of the node: built by :meth:`start`, ended by :meth:`stop`."""

    def __init__(
        self,
        kv: MemoryKV,
        keys: Keys,
        clock: ManualClock,
        config: NodeConfig,
        runs: RunLog,
        workers: WorkerPool,
        rng: random.Random,
    ) -> None:
        self.kv, self.keys, self.clock, self.config = kv, keys, clock, config
        self.runs = runs
        self.workers = workers
        self.policy = FirePolicy(config, clock)
        self.table = OwnedPartitions(config.partitions)
        self.router = ResultRouter(self.table)
        self.rng = rng
        self.notices = NotifyWatcher(kv, keys, self.table, clock)
        self.events = _Events()
        self.partitions: list[Partition] = []
        self._wake_at: dict[int, int] = {}
        self._seen = 0  # the store revision up to which notices were routed
        self._compacted = 0

    async def start(self) -> None:
        """Takes every partition under a fresh fence (a new epoch) and loads it, adopting
        (re-tokening) what a previous incarnation left live, as a takeover does."""
        self._seen = self.kv.revision
        for p in range(self.config.partitions):
            owner = self.keys.owner_key(p)
            await self.kv.delete(owner)  # the previous owner's key went with its lease
            fence = Fence(p, owner, await self.kv.put(owner, b"harness"))
            part = Partition(
                PartitionStore(self.kv, self.keys, fence),
                self.config, self.clock, self.runs, self.policy, self.workers, self.events,
                rng=self.rng,
            )  # fmt: skip
            self.table.add(part)
            self.partitions.append(part)
            await part.load()

    async def stop(self, graceful: bool) -> None:
        """Ends this incarnation: ``graceful`` gives back claimed, undispatched fires first
        (the next one applies their misfire policy); otherwise what is claimed is adopted."""
        for part in self.partitions:
            await part.stop(graceful=graceful)
            self.table.remove(part.partition)

    def route_notices(self) -> bool:
        """Hands the notices the client API wrote since the last call to the partitions, as
        the node's watch of ``notify/`` does (every revision, in order); returns whether
        there were any."""
        start = self.keys.notify_prefix()
        end = prefix_end(start)
        routed = False
        for _, events in self.kv.changes_after(self._seen):
            for ev in events:
                key = ev.kv.key
                if ev.kind == "put" and start <= key < end:
                    p = self.keys.parse_notify_key(key)
                    self.notices.notified(p, ev.kv.value, ev.kv.mod_revision)
                    routed = True
        self._seen = self.kv.revision
        return routed

    async def step(self) -> bool:
        """One pass at the current instant: notices, results, each partition's wheel, the
        results of what it fired (handlers that ended at once), its claim round.

        A claim round runs when its loop would run: when it claimed last time (it goes
        again at once), when its wake-up time has come, or when anything reached the node
        in this pass (the work that wakes the loop early: a notice, a retry's due entry).

        Returns:
            Whether anything happened (the caller passes again until nothing does).
        """
        moved = self.route_notices()
        moved |= await self._settle_reports()
        now = self.clock.now_ms()
        for part in self.partitions:
            if await part.driver.step():
                moved = True
                await self._settle_reports()  # what ended without suspending
            if moved or now >= self._wake_at.get(part.partition, now):
                wait_ms = await part.step()
                moved |= wait_ms == 0
                self._wake_at[part.partition] = now + wait_ms
        if self.events.problem:
            raise RuntimeError(f"the harness's node failed: {self.events.problem}")
        await self._compact()
        return moved

    async def _settle_reports(self) -> bool:
        started, results = self.workers.take_reports()
        if started:
            await self.router.on_started(WORKER_ID, started)
        if results:
            self.router.on_reported(results)
            await self.router.on_results(WORKER_ID, results)
        return bool(started or results)

    async def next_event_ms(self) -> int | None:
        """The next instant at which a partition has something to do: a wheel timer, or its
        claim loop's wake-up.

        A claim loop that sleeps until its window needs extending would, at each extension,
        read a slice of the due index that may hold nothing; so that wake-up moves to where
        the window first reaches a stored due key (or to the lead of the first entry it
        holds, if earlier): the extensions in between would read nothing and claim nothing.
        """
        times: list[int] = []
        half = self.config.window_ms // 2
        for part in self.partitions:
            expiry = part.driver.wheel.next_expiry_ms()
            if expiry is not None:
                times.append(expiry)
            wake = self._wake_at.get(part.partition)
            window = part.window
            if wake is not None and wake >= window.end - half:  # it wakes to extend
                first = await self._first_due_after(part.partition, window.end)
                held = window.first_due_ms()
                later = [
                    max(wake, first - half) if first is not None else None,
                    held - self.config.lead_ms if held is not None else None,
                ]
                wake = min((t for t in later if t is not None), default=None)
            if wake is not None:
                times.append(wake)
        return min(times, default=None)

    async def _first_due_after(self, partition: int, after_ms: int) -> int | None:
        prefix = self.keys.due_prefix(partition)
        start = prefix + b"%013d" % (after_ms + 1)
        found, _, _ = await self.kv.range(start, prefix_end(prefix), limit=1, keys_only=True)
        return self.keys.parse_due_key(found[0].key)[1] if found else None

    async def _compact(self) -> None:
        rev = self.kv.revision
        if rev - self._compacted >= _COMPACT_EVERY and self._seen == rev:
            await self.kv.compact(rev)
            self._compacted = rev
