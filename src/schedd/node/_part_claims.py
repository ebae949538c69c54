"""A partition's claims: due entries claimed L ahead, doubts re-read, API changes reconciled.

The claim loop takes due entries from the window as they come within the claim horizon and
claims them in batched fenced transactions (:class:`~._claims.ClaimPlanner` plans each); a
claimed execution becomes live with its timer armed. The same loop re-reads doubted jobs and
makes memory agree with the store, adopting (re-tokening) what memory lost track of.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Sequence

from schedd._errors import FencedOut, SchedError
from schedd._gc import freeze_survivors
from schedd.node._claims import Claim
from schedd.node._live import Live
from schedd.node._part_core import carried_by
from schedd.node._part_deps import Depending
from schedd.store import FIRE, DueEntry, JobView, StoredJob, execution_id
from schedd.v1 import execution_pb2

log = logging.getLogger(__name__)
#: How often a partition held back by the dispatch backlog looks whether it drained.
BACKLOG_POLL_MS = 50
# Executions due this soon after the hold horizon may have been sent out by a failed owner.
_PROBE_MARGIN_MS = 1_000


class Claiming(Depending):
    """The claim loop of a partition, and its reconciliation with the store."""

    async def _claim_loop(self) -> None:
        """Claims due entries L ahead and settles doubts, until the fence is lost.

        A store error ends only the round: whatever the round carried was doubted (see
        :meth:`doubt`) and is re-read by the next one. Any other exception ends the loop,
        and supervision releases the partition.
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
        await self.settle_arrivals()
        wait_ms = await self._claim_round()
        return min(wait_ms, max(1, self._rescan_at - self.clock.now_ms())) if wait_ms else 0

    async def _claim_round(self) -> int:
        now = self.clock.now_ms()
        if now + self.config.window_ms // 2 >= self.window.end:
            await self._extend_window(now)
        # Backpressure: while claimed executions wait past the bound for workers, a claim
        # would only lengthen that queue. Due entries stay durable in the store and in the
        # window, and are claimed once it drains (late: the job's misfire policy decides, a
        # catch-up job's missed fires then go in one claim).
        backlogged = self.dispatch_backlogged()
        batch: list[DueEntry] = []
        if not backlogged:
            horizon = self.pacer.horizon(self.window, now)
            batch = self.window.take(horizon, self.config.claim_batch)
        if batch:
            started = self.clock.monotonic()
            async with self.lock:
                await self._claim(batch)  # what failed is doubted (sort_out): re-read next
            self.pacer.observe(len(batch), self.clock.monotonic() - started)
            freeze_survivors()  # they all live until their fire: see schedd._gc
            return 0
        # Backlogged: the queue drains without waking this loop, so look again soon.
        wait_ms = BACKLOG_POLL_MS if backlogged else self.pacer.idle_wait_ms(self.window, now)
        later = self._doubts.next_later_ms()
        if later is not None:
            wait_ms = min(wait_ms, later - now)
        self._wake.clear()  # work that comes from here on wakes the wait
        return max(1, wait_ms)

    async def _settle_doubts(self) -> None:
        """Re-reads the doubted jobs and makes memory agree with the store (kept doubted on
        error)."""
        jobs, orphans = self._doubts.take()
        try:
            await self.reconcile(jobs, orphans=orphans)
        except BaseException:
            self._doubts.add(jobs, orphans)
            raise
        log.debug(
            "partition %d: reconciled %d doubted jobs with the store", self.partition, len(jobs),
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
        """Claims these due entries in batched fenced txns; returns the jobs whose claim failed
        (doubted already: the next round re-reads them).

        The entries left memory when they were taken: if a store call fails (or its outcome
        is unknown), every job not yet known to be claimed is doubted before the error goes
        on, so the next round re-reads it from the store instead of forgetting it.
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
        except SchedError:  # FencedOut too: the partition's next owner reads the store anyway
            self.doubt(e.job_id for e in entries[done:])  # the chunks before: sorted out
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
        carried = [
            (e.job_id, "" if e.kind == FIRE else execution_id(e.job_id, e.scheduled_ms))
            for e in (c.entry for c in claims)
        ]
        applied = await self.store.apply([c.item for c in claims])
        self.sort_out(applied, carried, "claim")  # what it did not write is re-read
        failed: list[str] = []
        for n, (claim, good, rev) in enumerate(
            zip(claims, applied.ok, applied.revisions, strict=True)
        ):
            e = claim.entry
            if good:
                self._fire_conflicts.discard(e.job_id)
                self._claimed(claim, rev)
            elif n not in applied.rejected:
                if e.kind == FIRE:
                    self._fire_conflicts.add(e.job_id)
                log.debug(
                    "claim of %s@%d (due %d) failed its compare", e.job_id, e.scheduled_ms, e.due_ms
                )
                failed.append(e.job_id)
        return failed

    def _claimed(self, claim: Claim, rev: int) -> None:
        for ex in claim.executions:
            ex.fencing_token = rev
            self.arm_new(ex)
        if claim.missed:
            self.history.record(claim.missed)
            for ex in claim.missed:
                log.info("execution %s missed: %s", ex.id, ex.reason, extra=self.run_fields(ex))
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
        """Re-reads these jobs from the store and makes memory agree (after notify or a doubt).

        Per job: the cached spec and cursor, its due entries, and its live executions: one
        the store no longer holds with the same token is cancelled; one the store holds that
        memory does not (a claim whose answer was lost, or an orphan, see :meth:`doubt`) is
        adopted with a new token. If the store fails, the jobs stay doubted and the error
        goes on.
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
                await self.adopt(adopt)
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
            live = self.live[eid]
            if current is None or current.fencing_token != live.ex.fencing_token:
                why = "removed by an API change"
                if current is not None and current.state == execution_pb2.EXECUTION_CANCELLED:
                    why = current.reason  # CancelExecution: ended by adopt below
                self.cancel(live, why)
            elif eid in orphans:  # unchanged in the store, but nothing has it in flight
                self.cancel(live, "handed out again")
        # The view holds every due entry of its runs: any RETRY_WAIT run without one is an
        # orphan, whatever its due time.
        waiting = {e.scheduled_ms for e in view.due if e.kind != FIRE}
        return [
            r
            for r in view.runs
            if r.id not in self.live and to_adopt(r, r.scheduled_ms in waiting, r.due_ms)
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

    # -- adoption: executions another epoch (or an unknown write) left ------------------------

    async def adopt(self, runs: Sequence[execution_pb2.Execution]) -> None:
        """Re-tokens executions that may have been sent out under another token, then makes
        them live: what a previous epoch left, and what a failed write left unknown. Those
        due within the hold horizon may be out on a worker already (sent, held, running or
        run by the failed owner): the workers are probed first, so the one that has it keeps
        it under the new token instead of another running it again. The rest are armed.

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
        written = self.sort_out(applied, carried_by(runs), "adoption")
        adopted = []
        for r, rev in zip(runs, written.revisions, strict=True):
            if rev:
                log.debug("%s: adopted under token %d", r.id, rev, extra=self.run_fields(r, rev))
                r.fencing_token = rev
                adopted.append(r)
        self._arm_adopted(adopted)

    async def _end_cancelled(
        self, runs: Sequence[execution_pb2.Execution]
    ) -> list[execution_pb2.Execution]:
        """Ends the executions CancelExecution marked (their run keys go, compared on the
        cancel's revision; the history records them CANCELLED); returns the others."""
        cancelled = [r for r in runs if r.state == execution_pb2.EXECUTION_CANCELLED]
        if not cancelled:
            return list(runs)
        applied = await self.store.apply(
            [self.store.finish_run(r, then=self.told(r)) for r in cancelled]
        )
        written = self.sort_out(applied, carried_by(cancelled), "cancellation")
        ended = [r for r, rev in zip(cancelled, written.revisions, strict=True) if rev]
        self.history.record(ended)
        for r in ended:
            log.info("%s: %s", r.id, r.reason, extra=self.run_fields(r))
        return [r for r in runs if r.state != execution_pb2.EXECUTION_CANCELLED]

    def _arm_adopted(self, runs: list[execution_pb2.Execution]) -> None:
        now = self.clock.now_ms()
        horizon = now + self.config.hold_ms + _PROBE_MARGIN_MS
        probe: list[Live] = []
        sealed = self.policy.sealed_in_memory()
        for ex in runs:
            live = self.live[ex.id] = Live(ex)
            if sealed and self.policy.split_sealed([live], self.jobs)[1]:
                self.arm_at(live, now)  # refused when it fires: never sent, not even probed
                continue
            fire_ms = self.prepare(live)
            if ex.due_ms <= horizon:
                probe.append(live)
            else:
                self.arm_at(live, max(fire_ms, now))
        if probe:
            self._probe(probe)

    def _probe(self, lives: list[Live]) -> None:
        by_id = {live.ex.id: live for live in lives}

        def answer(execution_id: str, taken: bool) -> None:
            live = by_id.pop(execution_id, None)
            if live is None or self.live.get(execution_id) is not live:
                return  # it left the partition meanwhile
            now = self.clock.now_ms()
            log.debug(
                "%s: probe %s (token %d)", execution_id, "taken" if taken else "not taken",
                live.ex.fencing_token,
            )  # fmt: skip
            if not taken:
                self.arm_at(live, max(self.prepare(live), now))
                return
            self._went_out(live, now)
            live.message = None
            live.ex.state = execution_pb2.EXECUTION_DISPATCHED

        msgs = []
        for live in lives:
            assert live.message is not None  # built by prepare
            msgs.append(live.message)
        self.outbound.probe(msgs, answer)


def to_adopt(run: execution_pb2.Execution, has_entry: bool, known_until_ms: int) -> bool:
    """Whether a run the store holds is adopted (re-tokened and armed) rather than left to its
    due entry: a cancelled one (to end it, wherever it waited), and one that no RUN entry will
    claim. A run with a RUN entry (a retry, trigger or redrive) is claimed through it; a
    RETRY_WAIT run due by ``known_until_ms`` (every due entry up to then was read) without
    one lost its timer (a node of key format 1 dropped it, misreading its key) and is
    adopted, so it cannot wait forever."""
    if run.state == execution_pb2.EXECUTION_CANCELLED:
        return True
    if has_entry:
        return False
    return run.state != execution_pb2.EXECUTION_RETRY_WAIT or run.due_ms <= known_until_ms
