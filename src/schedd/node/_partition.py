"""One owned partition: its window of due entries, claims ahead of the fire, its timer wheel.

The life of a schedule fire here::

    due/p/{due_ms}/{job} in etcd --load (window W)--> self.window (sorted, in memory)
        --claim at due_ms - L (batched, fenced txn)--> runs/p/{job}/{sched} PENDING, token = rev
        --wheel timer at due_ms--> Dispatch on a worker stream (no etcd on this path)
        --Result with the token--> one fenced compare-and-delete (or retry / dead letter)

Everything that matters is in etcd; this object is rebuilt from it on start or takeover, and
every execution it inherits is re-tokened before it is dispatched again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence

from schedd._clock import Clock
from schedd._errors import FencedOut, SchedError
from schedd._gc import freeze_survivors
from schedd.history import History
from schedd.node._claims import Claim, ClaimPlanner
from schedd.node._config import NodeConfig
from schedd.node._live import Doubts, Firing, Live, PartitionEvents, claims_to_give_back
from schedd.node._pacing import ClaimPacer
from schedd.node._refusals import RefusedWrites
from schedd.node._window import DueWindow
from schedd.obs import MetricsRecorder, NoopRecorder
from schedd.store import FIRE, DueEntry, JobView, PartitionStore, StoredJob, execution_id
from schedd.timerwheel import TimerWheel, WheelDriver
from schedd.v1 import execution_pb2

log = logging.getLogger(__name__)
#: How often a partition held back by the dispatch backlog looks whether it drained.
BACKLOG_POLL_MS = 50


class Partition:
    """Schedules the jobs of one partition while this node holds its fence.

    It owns the partition's state: the window of due entries, the cached jobs, the claimed
    executions (:attr:`live`), the timer wheel and the lock that orders its store writes.
    Firing and settling reach it through its public methods and attributes only.
    """

    def __init__(
        self,
        store: PartitionStore,
        config: NodeConfig,
        clock: Clock,
        history: History,
        firing: Firing,
        events: PartitionEvents,
        *,
        recorder: MetricsRecorder | None = None,
    ) -> None:
        self.store = store
        self.partition = store.partition
        self.config = config
        #: ``extra=`` of this partition's log lines (its fields in ``--log-format json``).
        self.log_fields: dict[str, object] = {"node": config.node_id, "partition": self.partition}
        self.clock = clock
        self.history = history
        self.firing = firing
        self.events = events
        self.recorder: MetricsRecorder = recorder or NoopRecorder()
        self.planner = ClaimPlanner(store, config.grace_ms)
        self.window = DueWindow()
        self.jobs: dict[str, StoredJob] = {}
        self.live: dict[str, Live] = {}
        self.wheel: TimerWheel[str] = TimerWheel(tick_ms=config.tick_ms, start_ms=clock.now_ms())
        self.driver: WheelDriver[str] = WheelDriver(self.wheel, clock, self._on_timers)
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        #: Held by every sequence of store writes of this partition (claims, results, ...).
        self.lock = asyncio.Lock()
        self.stopped = asyncio.Event()
        self.pacer = ClaimPacer(config)
        self._doubts = Doubts()  # re-read by the claim loop, see doubt()
        self.refusals = RefusedWrites()  # see refused()
        self._fire_conflicts: set[str] = set()  # jobs whose last schedule-fire claim failed
        self._reload_wanted = False
        self._stopping = False

    # -- lifecycle ----------------------------------------------------------------------------

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
        inherited = [r for r in runs if _to_adopt(r, (r.job_id, r.scheduled_ms) in waiting, end)]
        await self._adopt(inherited)
        log.info(
            "partition %d: loaded %d due entries, adopted %d live executions (epoch %d)",
            self.partition, len(entries), len(inherited), self.store.fence.epoch,
            extra=self.log_fields,
        )  # fmt: skip

    async def stop(self, graceful: bool = False, timeout: float | None = None) -> list[str]:
        """Stops the loops; returns the ids of executions this partition had in memory.

        Graceful (the partition is handed over on purpose: rebalance, shutdown, clock skew):
        first gives back claimed fires not yet dispatched (:meth:`unclaim`, bounded by
        ``timeout``), so the next owner applies their misfire policy. Not graceful (the fence
        is lost, or a loop crashed): the next owner adopts what etcd holds.
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
        return list(self.live)

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
                    self.live.pop(lv.ex.id, None)
                    if lv.timer is not None:
                        self.driver.cancel(lv.timer)
            if not items:
                return 0
            try:
                ok = (await self.store.apply(items)).ok
            except SchedError as exc:  # FencedOut too
                ok = [False] * len(items)
                log.warning(
                    "partition %d: could not give back claimed fires (%s); the next owner "
                    "adopts what etcd holds",
                    self.partition,
                    exc,
                    extra=self.log_fields,
                )
            n = 0
            for lives, good in zip(groups, ok, strict=True):
                if good:
                    n += len(lives)
                    log.debug("gave back %s", ", ".join(lv.ex.id for lv in lives))
                else:
                    self.live.update((lv.ex.id, lv) for lv in lives)
            return n

    def fenced_out(self, exc: FencedOut) -> None:
        """The fence no longer holds (a newer owner exists): this partition must stop."""
        log.warning("%s; stopping", exc, extra=self.log_fields)  # the message names the partition
        self._stopping = True
        self.events.partition_lost(
            self.partition, f"fenced out: epoch {exc.epoch} is no longer current"
        )

    def _task_ended(self, task: asyncio.Task[None]) -> None:
        """Supervision: a loop of this partition that ends while the partition runs is a crash.

        A partition whose claim loop or wheel has stopped fires nothing while it stays owned,
        the worst failure a scheduler can have; so the node is told to release it (a peer, or
        this node with a fresh partition, takes it over from what etcd holds).
        """
        if self._stopping or task.cancelled():
            return
        self._stopping = True
        exc = task.exception()
        log.error(
            "partition %d: %s %s; releasing the partition",
            self.partition,
            task.get_name(),
            "crashed" if exc else "ended",
            exc_info=exc,
            extra=self.log_fields,
        )
        self.events.partition_failed(self.partition, f"{task.get_name()} crashed: {exc!r}")

    async def _end_cancelled(
        self, runs: Sequence[execution_pb2.Execution]
    ) -> list[execution_pb2.Execution]:
        """Ends the executions CancelExecution marked (their run keys go, compared on the
        cancel's revision; the history records them CANCELLED); returns the others."""
        cancelled = [r for r in runs if r.state == execution_pb2.EXECUTION_CANCELLED]
        if not cancelled:
            return list(runs)
        applied = await self.store.apply([self.store.finish_run(r) for r in cancelled])
        ok = applied.ok
        self.history.record([r for r, good in zip(cancelled, ok, strict=True) if good])
        for n, (r, good) in enumerate(zip(cancelled, ok, strict=True)):
            if good:
                log.info("%s: %s", r.id, r.reason, extra=self._run_fields(r))
            elif n in applied.rejected:
                self.refused("cancellation", r.job_id, r.id, applied.rejected[n])
            else:  # changed meanwhile: read it again
                self.doubt([r.job_id])
        return [r for r in runs if r.state != execution_pb2.EXECUTION_CANCELLED]

    async def _adopt(self, runs: Sequence[execution_pb2.Execution]) -> None:
        """Re-tokens executions that may have been sent out under another token, then hands
        them to firing (which probes workers for those that may be out, and arms the rest):
        what a previous epoch left, and what a failed write left unknown.

        One whose rewrite failed its compare changed meanwhile: its job is doubted, so the
        claim loop re-reads it. Raises what the store raises; nothing is armed then.
        """
        runs = await self._end_cancelled(runs)
        if not runs:
            return
        # Their dispatches carry the job's payload, timeout and HTTP/shell target: a partition
        # just taken over has no job cached yet (claims fetch theirs lazily).
        missing = [r.job_id for r in runs if r.job_id not in self.jobs]
        if missing:
            self.jobs.update(await self.store.fetch_jobs(missing))
        items = []
        for r in runs:
            r.state = execution_pb2.EXECUTION_PENDING
            r.worker_id = ""
            items.append(self.store.rewrite_run(r))
        applied = await self.store.apply(items)
        adopted = []
        for n, (r, good, rev) in enumerate(zip(runs, applied.ok, applied.revisions, strict=True)):
            if good:
                log.debug("%s: adopted under token %d", r.id, rev, extra=self._run_fields(r, rev))
                r.fencing_token = rev
                adopted.append(r)
            elif n in applied.rejected:
                self.refused("adoption", r.job_id, r.id, applied.rejected[n])
            else:
                self.doubt([r.job_id])
        self.firing.adopt(self, adopted)

    def _run_fields(self, ex: execution_pb2.Execution, token: int = 0) -> dict[str, object]:
        """``extra=`` of a line about one execution of this partition."""
        fields = {**self.log_fields, "job": ex.job_id, "execution": ex.id}
        if token or ex.fencing_token:
            fields["token"] = token or ex.fencing_token
        return fields

    def _arm(self, ex: execution_pb2.Execution) -> None:
        live = Live(ex)
        self.live[ex.id] = live
        fire_ms = self.firing.prepare(self, live)
        live.timer = self.driver.add(max(fire_ms, self.clock.now_ms()), ex.id)

    # -- for firing and settling --------------------------------------------------------------

    def arm_at(self, live: Live, fire_ms: int) -> None:
        """(Re-)arms the timer of a live execution of this partition for ``fire_ms``."""
        live.timer = self.driver.add(fire_ms, live.ex.id)

    def disarm(self, live: Live) -> None:
        """Cancels the timer of a live execution, if it has one pending."""
        if live.timer is not None:
            self.driver.cancel(live.timer)

    def add_due(self, entry: DueEntry) -> None:
        """A due entry this node wrote (a retry's timer): claimed when due, if in the window."""
        if self.window.put(entry):
            self._wake.set()

    # -- claims -----------------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        """Claims due entries L ahead and settles doubts, until the fence is lost.

        A store error ends only the round: whatever the round carried was doubted (see
        :meth:`doubt`) and is re-read by the next one. Any other exception ends the loop,
        and supervision (:meth:`_task_ended`) releases the partition.
        """
        while True:
            try:
                wait_ms = await self.step()
            except FencedOut as exc:
                self.fenced_out(exc)
                return
            except SchedError as exc:
                log.warning(
                    "partition %d: claim round failed: %s; retrying", self.partition, exc,
                    extra=self.log_fields,
                )  # fmt: skip
                await self.clock.sleep(0.5)
                continue
            if wait_ms > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), max(0.005, wait_ms / 1000))

    async def step(self) -> int:
        """One round of the claim loop without its wait: reloads the window if asked,
        re-reads ripe doubts, claims what is due within the horizon.

        Returns:
            0 when it claimed (the loop goes again at once), else how long (ms) the loop
            sleeps now unless woken by new work. Raises what the store raises.
        """
        if self._reload_wanted:
            await self._reload_window()
        if self._doubts.ripen(self.clock.now_ms()):
            await self._settle_doubts()
        return await self._claim_round()

    async def _claim_round(self) -> int:
        now = self.clock.now_ms()
        if now + self.config.window_ms // 2 >= self.window.end:
            await self._extend_window(now)
        # Backpressure: while claimed executions wait past the bound for workers, a claim
        # would only lengthen that queue. Due entries stay durable in etcd and in the window,
        # and are claimed once it drains (late: the job's misfire policy decides, a catch-up
        # job's missed fires then go in one claim).
        backlogged = self.firing.dispatch_backlogged()
        batch: list[DueEntry] = []
        if not backlogged:
            horizon = self.pacer.horizon(self.window, now)
            batch = self.window.take(horizon, self.config.claim_batch)
        if batch:
            started = self.clock.monotonic()
            async with self.lock:
                failed = await self._claim(batch)
            self.pacer.observe(len(batch), self.clock.monotonic() - started)
            freeze_survivors()  # they all live until their fire: see schedd._gc
            # A concurrent API change failed these: re-read them on the next round.
            self.doubt(failed)
            return 0
        # Backlogged: the queue drains without waking this loop, so look again soon.
        wait_ms = BACKLOG_POLL_MS if backlogged else self.pacer.idle_wait_ms(self.window, now)
        later = self._doubts.next_later_ms()
        if later is not None:
            wait_ms = min(wait_ms, later - now)
        self._wake.clear()  # work that comes from here on wakes the wait
        return max(1, wait_ms)

    # -- doubts: store calls that failed or whose outcome is unknown ----------------------------

    def doubt(self, job_ids: Iterable[str], orphans: Iterable[str] = ()) -> None:
        """Marks jobs whose durable state memory may not match, to be re-read and reconciled.

        Every path that writes (claims, results, redeliveries, skips) calls this when a store
        call failed, or its outcome is unknown (the request left, no answer came), or one of
        its compares failed: the work it carried must not be dropped with it. ``orphans`` are
        executions of those jobs that nothing has in flight any more (a result or redelivery
        that was not written): if etcd still holds one unchanged, it is handed out again
        with a new token (a worker that finished it answers from its ledger).
        """
        if self._doubts.add(job_ids, orphans):
            self._wake.set()

    def refused(self, what: str, job_id: str, execution_id: str, why: str) -> None:
        """The store refused, on its own, an item that wrote this work (see
        :class:`~._refusals.RefusedWrites`): it is re-read, and handed out again if etcd still
        holds it, after a backoff that grows with each refusal; logged once, always counted.

        Args:
            what: what the item wrote (``"result"``, ``"claim"``, ...), the metric's label.
            job_id: the job whose state is re-read.
            execution_id: the execution the item carried ("" for a schedule fire's claim).
            why: the store's reason.
        """
        key = execution_id or job_id
        count, retry_at = self.refusals.record(key, self.clock.now_ms())
        self.recorder.write_rejected(what)
        log.log(
            logging.ERROR if count == 1 else logging.DEBUG,
            "partition %d: the store refused the %s of %s on its own (%s); the rest of its "
            "batch was written; trying it again in %d ms (refusal %d, backing off%s)",
            self.partition, what, key, why, retry_at - self.clock.now_ms(), count,
            "; later refusals are logged at debug level" if count == 1 else "",
            extra=self.log_fields,
        )  # fmt: skip
        self._doubts.add_later(retry_at, job_id, execution_id)
        self._wake.set()

    async def _settle_doubts(self) -> None:
        """Re-reads the doubted jobs and makes memory agree with etcd (kept doubted on error)."""
        jobs, orphans = self._doubts.take()
        try:
            await self.reconcile(jobs, orphans=orphans)
        except BaseException:
            self._doubts.add(jobs, orphans)
            raise
        log.debug(
            "partition %d: reconciled %d doubted jobs with etcd", self.partition, len(jobs),
            extra=self.log_fields,
        )  # fmt: skip

    async def _extend_window(self, now: int) -> None:
        # Entries inside the old window are known already (loaded, or written by our claims,
        # or brought by notify); only the new slice is read.
        entries, _ = await self.store.load_due(
            now + self.config.window_ms, after_ms=self.window.end
        )
        self.window.extend(entries, now + self.config.window_ms)
        if entries:
            freeze_survivors()

    async def _claim(self, entries: list[DueEntry]) -> list[str]:
        """Claims these due entries in batched fenced txns; returns the jobs whose claim failed.

        The entries left memory when they were taken: if a store call fails (or its outcome
        is unknown), every job not yet known to be claimed is doubted before the error goes
        on, so the next round re-reads it from etcd instead of forgetting it.
        """
        done = 0
        failed: list[str] = []
        try:
            missing = [e.job_id for e in entries if e.job_id not in self.jobs]
            if missing:
                self.jobs.update(await self.store.fetch_jobs(missing))
            # A RUN entry's execution; and for a schedule fire whose claim failed before, the
            # run it would create, if it exists already (see ClaimPlanner.plan).
            conflicts = self._fire_conflicts
            runs = await self.store.get_runs(
                (e.job_id, e.scheduled_ms)
                for e in entries
                if e.kind != FIRE or e.job_id in conflicts
            )
            step = self.config.txn_items
            for done in range(0, len(entries), step):
                # One transaction's worth at a time: planning is CPU work, and the wheel of
                # this loop must get its turn between chunks (aligned jobs become claimable
                # exactly at the fire instants of other aligned jobs).
                failed += await self._claim_chunk(entries[done : done + step], runs)
                await self._yield_to_fires()
        except SchedError:  # FencedOut too: the partition's next owner reads etcd anyway
            self.doubt([*failed, *(e.job_id for e in entries[done:])])
            raise
        return failed

    async def _yield_to_fires(self) -> None:
        """Lets the wheel go first when one of its buckets is due within a few ticks.

        A real pause of the event loop (a few ms at most), not a wait for scheduler time:
        the wheel's driver, on whatever clock, gets the loop while it is paused.
        """
        nxt = self.driver.wheel.next_expiry_ms()
        wait_ms = -1 if nxt is None else nxt - self.clock.now_ms()
        if 0 <= wait_ms <= 5 * self.config.tick_ms:
            await asyncio.sleep((wait_ms + 1) / 1000)
        else:
            await asyncio.sleep(0)

    async def _claim_chunk(
        self,
        entries: list[DueEntry],
        runs: dict[tuple[str, int], execution_pb2.Execution],
    ) -> list[str]:
        now = self.clock.now_ms()
        plan, jobs = self.planner.plan, self.jobs
        claims = [
            plan(e, jobs.get(e.job_id), runs.get((e.job_id, e.scheduled_ms)), now) for e in entries
        ]
        applied = await self.store.apply([c.item for c in claims])
        failed: list[str] = []
        for n, (claim, good, rev) in enumerate(
            zip(claims, applied.ok, applied.revisions, strict=True)
        ):
            if good:
                self._fire_conflicts.discard(claim.entry.job_id)
                self._claimed(claim, rev)
            elif n in applied.rejected:
                e = claim.entry
                eid = "" if e.kind == FIRE else execution_id(e.job_id, e.scheduled_ms)
                self.refused("claim", e.job_id, eid, applied.rejected[n])
            else:
                e = claim.entry
                if e.kind == FIRE:
                    self._fire_conflicts.add(e.job_id)
                log.debug(
                    "claim of %s@%d (due %d) failed its compare", e.job_id, e.scheduled_ms, e.due_ms
                )
                failed.append(claim.entry.job_id)
        return failed

    def _claimed(self, claim: Claim, rev: int) -> None:
        for ex in claim.executions:
            ex.fencing_token = rev
            self._arm(ex)
        if claim.missed:
            self.history.record(claim.missed)
            for ex in claim.missed:
                log.info("execution %s missed: %s", ex.id, ex.reason, extra=self._run_fields(ex))
                self.recorder.missed(ex.reason)
        state = claim.next_state
        if state is None:
            return
        cached = self.jobs[claim.entry.job_id]
        self.jobs[claim.entry.job_id] = StoredJob(cached.job, cached.spec_revision, state, rev)
        if state.due_ms and state.due_ms <= self.window.end:  # window.put, inlined: per fire
            nxt = DueEntry(
                self.partition, state.due_ms, claim.entry.job_id, FIRE, state.next_fire_ms, rev
            )
            self.window.entries[(nxt.due_ms, nxt.job_id, 0)] = nxt  # slot(nxt)
            self._wake.set()

    # -- reconciling with API changes ---------------------------------------------------------

    async def reconcile(self, job_ids: Iterable[str], *, orphans: Iterable[str] = ()) -> None:
        """Re-reads these jobs from etcd and makes memory agree (after notify or a doubt).

        Per job: the cached spec and cursor, its due entries, and its live executions: one
        etcd no longer holds with the same token is cancelled; one etcd holds that memory
        does not (a claim whose answer was lost, or an orphan, see :meth:`doubt`) is adopted
        with a new token. If the store fails, the jobs stay doubted and the error goes on.
        """
        ids = list(dict.fromkeys(job_ids))
        orphaned = set(orphans)
        try:
            async with self.lock:
                views = await self.store.fetch_views(ids)
                wanted = set(ids)
                # A scan of the window: changes (update, pause, delete) are rare next to fires;
                # creations take the cheap path of :meth:`add_created`.
                self.window.drop_jobs(wanted)
                adopt: list[execution_pb2.Execution] = []
                for job_id in ids:
                    adopt += self._reconcile_one(job_id, views[job_id], orphaned)
                await self._adopt(adopt)
        except SchedError:
            self.doubt(ids, orphaned)
            raise
        self._wake.set()

    def add_created(self, entries: Sequence[DueEntry]) -> None:
        """First due entries of newly created jobs (from notify): nothing to reconcile."""
        for e in entries:
            self.window.put(e, replace=False)
        if entries:
            freeze_survivors()
        self._wake.set()

    def _reconcile_one(
        self, job_id: str, view: JobView, orphans: set[str]
    ) -> list[execution_pb2.Execution]:
        """Makes memory agree with one job's view; returns the runs to adopt."""
        if view.cached is None:
            self.jobs.pop(job_id, None)
            self.planner.forget(job_id)
        else:
            self.jobs[job_id] = view.cached
        for e in view.due:
            self.window.put(e)
        runs = {r.id: r for r in view.runs}
        for eid in [e for e, lv in self.live.items() if lv.ex.job_id == job_id]:
            current = runs.get(eid)
            if current is None or current.fencing_token != self.live[eid].ex.fencing_token:
                why = "removed by an API change"
                if current is not None and current.state == execution_pb2.EXECUTION_CANCELLED:
                    why = current.reason  # CancelExecution: ended by _adopt below
                self.firing.cancel(self, self.live.pop(eid), why)
            elif eid in orphans:  # unchanged in etcd, but nothing has it in flight
                self.firing.cancel(self, self.live.pop(eid), "handed out again")
        # The view holds every due entry of its runs: any RETRY_WAIT run without one is an
        # orphan, whatever its due time.
        waiting = {e.scheduled_ms for e in view.due if e.kind != FIRE}
        return [
            r
            for r in view.runs
            if r.id not in self.live and _to_adopt(r, r.scheduled_ms in waiting, r.due_ms)
        ]

    def request_reload(self) -> None:
        """Asks for the whole window to be read again (after a large batch of API changes or
        a notify watch that missed changes); the claim loop does it before its next round."""
        self._reload_wanted = True
        self._wake.set()

    async def _reload_window(self) -> None:
        now = self.clock.now_ms()
        entries, _ = await self.store.load_due(now + self.config.window_ms)
        self._reload_wanted = False
        async with self.lock:
            self.window.reset(entries, now + self.config.window_ms)
            in_window = {e.job_id for e in entries}
            for j in [j for j in self.jobs if j in in_window]:
                self.jobs.pop(j, None)
        self._wake.set()

    # -- firing -----------------------------------------------------------------------------

    async def _on_timers(self, execution_ids: list[str]) -> None:
        lives = [self.live[e] for e in execution_ids if e in self.live]
        if lives:
            await self.firing.fire(self, lives)


def _to_adopt(run: execution_pb2.Execution, has_entry: bool, known_until_ms: int) -> bool:
    """Whether a run etcd holds is adopted (re-tokened and armed) rather than left to its due
    entry: a cancelled one (to end it, wherever it waited), and one that no RUN entry will
    claim. A run with a RUN entry (a retry, trigger or redrive) is claimed through it; a
    RETRY_WAIT run due by ``known_until_ms`` (every due entry up to then was read) without
    one lost its timer (a node of key format 1 dropped it, misreading its key) and is
    adopted, so it cannot wait forever."""
    if run.state == execution_pb2.EXECUTION_CANCELLED:
        return True
    if has_entry:
        return False
    return run.state != execution_pb2.EXECUTION_RETRY_WAIT or run.due_ms <= known_until_ms
